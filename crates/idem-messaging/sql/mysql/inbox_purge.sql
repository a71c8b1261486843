-- ? the dedup window in milliseconds, ? the batch size. Deletes at most that many rows older
-- than the window, oldest first.
DELETE FROM {qualified}
WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? * 1000 MICROSECOND
ORDER BY processed_at
LIMIT ?
