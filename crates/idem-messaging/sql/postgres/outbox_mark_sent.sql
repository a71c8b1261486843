-- $1 ids, $2 claim token. Deletes the messages the broker confirmed, if this claim still holds
-- them: a relay whose lease ran out, and whose messages another relay claimed since, changes
-- nothing (the other relay publishes them again; the consumers' inbox skips the copies).
DELETE FROM "{schema}"."{table}"
WHERE id = ANY($1) AND claim = $2
