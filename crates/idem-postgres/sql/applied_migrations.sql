-- The migrations applied to the store's table, as sqlx records them.
SELECT version, checksum, success
FROM "{schema}"."{table}_migrations"
ORDER BY version
