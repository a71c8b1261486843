-- ?3 lease_until. Draws the next fencing token and gives the record's lease to it.
UPDATE idem_fencing SET last = last + 1 WHERE id = 0;
UPDATE idem_records
SET token = (SELECT last FROM idem_fencing WHERE id = 0),
    lease_until = ?3,
    expires_at = max(expires_at, ?3)
WHERE scope = ?1 AND key = ?2
RETURNING token
