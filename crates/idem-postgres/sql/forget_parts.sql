-- $1 now (unused), $2 scope, $3 key. Every streamed part of the address, whatever its token: the
-- second statement of a forget that deleted a record, on a snapshot taken after it (see
-- `PostgresStore::forget`).
DELETE FROM "{schema}"."{table}_parts"
WHERE scope = $2 AND key = $3
