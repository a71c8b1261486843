-- ? now (NULL: the server's), ? limit. At most that many expired parts, oldest first, locked for
-- the transaction that deletes them; rows that another transaction holds (a concurrent purger,
-- an append) are skipped.
SELECT scope, key_digest, token, idx
FROM `{table}_parts`
WHERE expires_at <= COALESCE(?, {now})
ORDER BY expires_at
LIMIT ?
FOR UPDATE SKIP LOCKED
