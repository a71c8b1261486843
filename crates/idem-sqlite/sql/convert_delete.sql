DELETE FROM idem_records_0001
WHERE rowid = ?1
