-- ?1 now, ?2 limit.
DELETE FROM idem_parts
WHERE rowid IN (SELECT rowid FROM idem_parts WHERE expires_at <= ?1 LIMIT ?2)
