-- ? scope, ? key digest, ? now (NULL: the server's). The record, if it is live.
SELECT fingerprint, state, token, lease_until, created_at, completed_at, expires_at, response
FROM `{table}`
WHERE scope = ? AND key_digest = ? AND COALESCE(?, {now}) < expires_at
