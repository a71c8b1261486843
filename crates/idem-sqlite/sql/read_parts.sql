-- ?3 token, ?4 now, ?5 the first index, ?6 at most this many. The live parts of execution ?3
-- from index ?5 on, in order, along the primary key.
SELECT idx, part
FROM idem_parts
WHERE scope = ?1 AND key = ?2 AND token = ?3 AND idx >= ?5 AND ?4 < expires_at
ORDER BY idx
LIMIT ?6
