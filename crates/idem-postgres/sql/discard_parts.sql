-- $1 now (unused: expired parts go too), $2 scope, $3 key, $4 token. Deletes the parts of the
-- execution.
DELETE FROM "{schema}"."{table}_parts"
WHERE scope = $2 AND key = $3 AND token = $4
