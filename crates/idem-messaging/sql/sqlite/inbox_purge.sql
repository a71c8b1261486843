-- ?1 the dedup window in milliseconds, ?2 the batch size. Deletes at most ?2 rows older than the
-- window, oldest first.
DELETE FROM "{schema}"."{table}"
WHERE rowid IN (
    SELECT rowid
    FROM "{schema}"."{table}"
    WHERE processed_at < CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - ?1
    ORDER BY processed_at
    LIMIT ?2
)
