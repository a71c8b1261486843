-- ?1 now, ?2 processing, ?3 the last rowid of the step before (0 at first), ?4 the step's
-- length. One step of a census: the next ?4 records in rowid order, the table's own order, so
-- that a step reads a run of the table's pages and nothing else; the live ones among them
-- counted by state. `last` is NULL once no record is left.
SELECT max(id) AS last,
    coalesce(sum(state = ?2 AND ?1 < expires_at), 0) AS processing,
    coalesce(sum(state <> ?2 AND ?1 < expires_at), 0) AS completed,
    min(CASE WHEN state = ?2 AND ?1 < expires_at THEN created_at END) AS oldest_processing
FROM (
    SELECT rowid AS id, state, created_at, expires_at
    FROM idem_records
    WHERE rowid > ?3
    ORDER BY rowid
    LIMIT ?4
)
