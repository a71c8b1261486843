-- ?1 claim token, ?2 ids (a JSON array). Deletes the messages the broker confirmed, if this claim
-- still holds them: a message whose lease ran out and that another claim took stays, for that
-- claim to publish and mark.
DELETE FROM "{schema}"."{table}"
WHERE claim = ?1 AND id IN (SELECT value FROM json_each(?2))
