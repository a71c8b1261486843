-- $1 ids, $2 claim token. Gives back messages this claim could not publish for reasons that are
-- not theirs (the broker unreachable, the relay shutting down): due again at once, and the claim
-- does not count as an attempt.
UPDATE "{schema}"."{table}"
SET claim = NULL, attempts = attempts - 1, available_at = statement_timestamp()
WHERE id = ANY($1) AND claim = $2
