-- ?4 processing, ?5 token, ?6 lease_until, ?7 now, ?8 expires_at. Replaces an expired record.
INSERT INTO idem_records
    (scope, key, fingerprint, state, token, lease_until, created_at, completed_at, expires_at, response)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, NULL)
ON CONFLICT (scope, key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    state = excluded.state,
    token = excluded.token,
    lease_until = excluded.lease_until,
    created_at = excluded.created_at,
    completed_at = NULL,
    expires_at = excluded.expires_at,
    response = NULL
