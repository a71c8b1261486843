-- ? now (NULL: the server's), ? limit. At most that many expired records, oldest first, locked
-- for the transaction that deletes them by id; rows that another transaction holds (a
-- concurrent purger, or a caller's transaction completing that key) are skipped.
SELECT id
FROM `{table}`
WHERE expires_at <= COALESCE(?, {now})
ORDER BY expires_at
LIMIT ?
FOR UPDATE SKIP LOCKED
