-- ?3 now.
SELECT fingerprint, state, token, lease_until, created_at, completed_at, expires_at, response
FROM idem_records
WHERE scope = ?1 AND key = ?2 AND ?3 < expires_at
