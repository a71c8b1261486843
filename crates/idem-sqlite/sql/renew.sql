-- ?3 token, ?4 processing, ?5 now, ?6 lease_until.
UPDATE idem_records
SET lease_until = ?6, expires_at = max(expires_at, ?6)
WHERE scope = ?1 AND key = ?2 AND token = ?3 AND state = ?4 AND ?5 < expires_at
