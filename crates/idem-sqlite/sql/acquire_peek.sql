-- What a reader decides `acquire` on, with the response for a replay.
SELECT fingerprint, state, lease_until, expires_at, response
FROM idem_records
WHERE scope = ?1 AND key = ?2
