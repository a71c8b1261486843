-- ?3 token, ?4 processing, ?5 now.
DELETE FROM idem_records
WHERE scope = ?1 AND key = ?2 AND token = ?3 AND state = ?4 AND ?5 < expires_at
