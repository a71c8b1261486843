-- $1 id, $2 destination, $3 ordering key, $4 header names, $5 header values, $6 payload.
-- Inserts the message and notifies the relays. PostgreSQL delivers the notification when the
-- transaction commits (once, however many messages it enqueued) and drops it on rollback.
WITH enqueued AS (
    INSERT INTO "{schema}"."{table}" (
        id, seq, destination, ordering_key, header_names, header_values, payload,
        state, available_at, enqueued_at
    )
    VALUES (
        $1, nextval('"{schema}"."{table}_seq"'), $2, $3, $4, $5, $6,
        'pending', statement_timestamp(), statement_timestamp()
    )
    RETURNING id
)
SELECT pg_notify('{channel}', '') FROM enqueued
