-- ?1 id, ?2 destination, ?3 ordering key, ?4 headers (a JSON array of [name, value] pairs),
-- ?5 payload. Inserts the message in the caller's transaction; relays on SQLite find it when they
-- poll.
INSERT INTO "{schema}"."{table}" (
    id, destination, ordering_key, headers, payload, state, available_at, enqueued_at
)
VALUES (
    ?1, ?2, ?3, ?4, ?5, 'pending',
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)
