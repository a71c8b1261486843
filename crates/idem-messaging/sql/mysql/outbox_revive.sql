-- ? id. Puts a dead letter back in line, with its attempts reset.
UPDATE {qualified}
SET state = 'pending', attempts = 0, dead_at = NULL, available_at = UTC_TIMESTAMP(6)
WHERE id = ? AND state = 'dead'
