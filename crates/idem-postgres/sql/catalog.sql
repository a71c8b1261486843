-- $1 schema, $2 migrations table, $3 records table (quoted, qualified names). What exists.
SELECT to_regnamespace($1) IS NOT NULL AS schema,
    to_regclass($2) IS NOT NULL AS migrations,
    to_regclass($3) IS NOT NULL AS records
