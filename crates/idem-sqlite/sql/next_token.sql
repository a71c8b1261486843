UPDATE idem_fencing
SET last = last + 1
WHERE id = 0
RETURNING last
