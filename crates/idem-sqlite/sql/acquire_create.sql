-- ?3 fingerprint, ?4 processing, ?5 lease_until, ?6 now, ?7 expires_at. Draws the next fencing
-- token and creates the record with it, or replaces an expired record.
UPDATE idem_fencing SET last = last + 1 WHERE id = 0;
INSERT INTO idem_records
    (scope, key, fingerprint, state, token, lease_until, created_at, completed_at, expires_at, response)
VALUES (?1, ?2, ?3, ?4, (SELECT last FROM idem_fencing WHERE id = 0), ?5, ?6, NULL, ?7, NULL)
ON CONFLICT (scope, key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    state = excluded.state,
    token = excluded.token,
    lease_until = excluded.lease_until,
    created_at = excluded.created_at,
    completed_at = NULL,
    expires_at = excluded.expires_at,
    response = NULL
RETURNING token
