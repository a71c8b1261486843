-- The migrations applied to the table: version, checksum, whether it succeeded.
SELECT version, checksum, success FROM `{table}_migrations` ORDER BY version
