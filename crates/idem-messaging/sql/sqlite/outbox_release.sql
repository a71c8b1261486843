-- ?1 claim token. Gives back what this claim still holds and did not settle (messages it could
-- not try, or a whole batch given back): due again at once, their attempt not counted.
UPDATE "{schema}"."{table}"
SET claim = NULL,
    claimed_by = NULL,
    available_at = CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
WHERE claim = ?1
