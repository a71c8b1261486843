-- One page of live records in one state, newest first. ? state; the bound, exclusive, in the
-- newest-first order (created_at, scope, key_digest): ? created_at, ? created_at, ? scope,
-- ? scope, ? key digest; ? now (NULL: the server's); ? scope (NULL: every scope) twice; ? limit.
--
-- A backward walk of the index on (state, created_at, scope, key_digest) from the bound: no
-- sort. The records it passes over that are expired or of another scope are read and skipped.
SELECT scope, key_digest, fingerprint, state, token, lease_until, created_at, completed_at,
    expires_at, response
FROM `{table}` FORCE INDEX (`{table}_state_created`)
WHERE state = ?
    AND (created_at < ? OR (created_at = ? AND (scope < ? OR (scope = ? AND key_digest < ?))))
    AND COALESCE(?, {now}) < expires_at
    AND (? IS NULL OR scope = ?)
ORDER BY state DESC, created_at DESC, scope DESC, key_digest DESC
LIMIT ?
