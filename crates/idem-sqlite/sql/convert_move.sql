-- ?1 rowid in idem_records_0001, ?2 the key's digest.
INSERT INTO idem_records
    (scope, key, fingerprint, state, token, lease_until, created_at, completed_at, expires_at, response)
SELECT scope, ?2, fingerprint, state, token, lease_until, created_at, completed_at, expires_at, response
FROM idem_records_0001
WHERE rowid = ?1
