-- ?1 id. Puts a dead letter back in line, with its attempts reset.
UPDATE "{schema}"."{table}"
SET state = 'pending', attempts = 0, dead_at = NULL,
    available_at = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
WHERE id = ?1 AND state = 'dead'
