-- ?3 token.
DELETE FROM idem_parts
WHERE scope = ?1 AND key = ?2 AND token = ?3
