-- ? scope, ? key digest, ? token. The parts of one execution, deleted.
DELETE FROM `{table}_parts`
WHERE scope = ? AND key_digest = ? AND token = ?
