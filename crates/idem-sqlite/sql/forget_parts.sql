-- Every execution's parts.
DELETE FROM idem_parts
WHERE scope = ?1 AND key = ?2
