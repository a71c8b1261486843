-- $1 id. Puts a dead letter back in line, with its attempts reset.
UPDATE "{schema}"."{table}"
SET state = 'pending', attempts = 0, dead_at = NULL, available_at = statement_timestamp()
WHERE id = $1 AND state = 'dead'
