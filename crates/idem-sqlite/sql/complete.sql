-- ?3 token, ?4 processing, ?5 now, ?6 completed, ?7 expires_at, ?8 response.
UPDATE idem_records
SET state = ?6, lease_until = NULL, completed_at = ?5, expires_at = ?7, response = ?8
WHERE scope = ?1 AND key = ?2 AND token = ?3 AND state = ?4 AND ?5 < expires_at
