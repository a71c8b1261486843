-- $1 the dedup window in milliseconds, $2 the batch size. Deletes at most $2 rows older than the
-- window, oldest first, skipping rows another purger holds.
WITH doomed AS (
    SELECT consumer, message_id
    FROM "{schema}"."{table}"
    WHERE processed_at < statement_timestamp() - $1::bigint * interval '1 millisecond'
    ORDER BY processed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM "{schema}"."{table}" AS i
USING doomed AS d
WHERE i.consumer = d.consumer AND i.message_id = d.message_id
