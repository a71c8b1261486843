-- The records of the first schema (the key in clear) not yet converted, ?1 at most.
SELECT rowid, key
FROM idem_records_0001
LIMIT ?1
