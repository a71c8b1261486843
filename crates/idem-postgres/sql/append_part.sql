-- Append one part, by the holder of the token only. $1 now, $2 scope, $3 key, $4 token, $5 the
-- part's index, $6 the part. One row: `live`, whether the token holds a live processing record;
-- `next`, the index the execution's next part takes (one more than its last part's, 0 when it
-- has none) as the statement's snapshot shows it; `appended`, whether this part was stored. The
-- part expires with the record, as it is now.
--
-- The record is locked `FOR SHARE` and re-read at its latest version, so an append is ordered
-- with a completion, release, takeover or forget of the same record: a part is stored only while
-- its token holds the record. Two appends of one index: the second inserts nothing (a retry, or
-- a concurrent duplicate), and the caller tells that from an index out of order by `next`.
WITH record AS (
    SELECT r.scope, r.key, r.expires_at, r.watched
    FROM "{schema}"."{table}" AS r
    WHERE r.scope = $2 AND r.key = $3
        -- `IS TRUE` keeps the state out of the index conditions: the record is found by primary
        -- key, never by walking the listing's index on (state, created_at).
        AND r.token = $4 AND (r.state = 'processing') IS TRUE AND {now} < r.expires_at
    FOR SHARE OF r
),
-- The parts are contiguous from 0, so this is their number; read from the end of the primary
-- key's range, not by counting every part.
next AS (
    SELECT coalesce(max(p.idx) + 1, 0) AS idx
    FROM "{schema}"."{table}_parts" AS p
    WHERE p.scope = $2 AND p.key = $3 AND p.token = $4
),
appended AS (
    INSERT INTO "{schema}"."{table}_parts" (scope, key, token, idx, part, expires_at)
    SELECT r.scope, r.key, $4, $5, $6, r.expires_at
    FROM record AS r, next AS n
    WHERE n.idx = $5
    ON CONFLICT (scope, key, token, idx) DO NOTHING
    RETURNING scope, key
)
SELECT r.scope IS NOT NULL AS live,
    n.idx AS next,
    a.scope IS NOT NULL AS appended,
    -- Followers on other instances are told as of a completion (see changes.rs), when the
    -- statement commits; only a record that somebody found in flight is worth a NOTIFY.
    CASE WHEN a.scope IS NOT NULL AND r.watched
        THEN pg_notify('{channel}', encode(sha256(a.scope || a.key), 'hex'))
    END AS notified
FROM next AS n
LEFT JOIN record AS r ON true
LEFT JOIN appended AS a ON true
