SELECT fingerprint, state, lease_until, expires_at
FROM idem_records
WHERE scope = ?1 AND key = ?2
