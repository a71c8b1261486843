-- ?1 now, ?2 limit.
DELETE FROM idem_records
WHERE rowid IN (SELECT rowid FROM idem_records WHERE expires_at <= ?1 LIMIT ?2)
