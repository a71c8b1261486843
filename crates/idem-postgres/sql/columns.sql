-- $1 the records table (quoted, qualified name). Its columns and their types.
SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type
FROM pg_attribute AS a
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
