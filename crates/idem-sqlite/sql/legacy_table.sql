SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'idem_records_0001')
