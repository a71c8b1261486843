-- ?3 token, ?4 lease_until.
UPDATE idem_records
SET token = ?3, lease_until = ?4, expires_at = max(expires_at, ?4)
WHERE scope = ?1 AND key = ?2
