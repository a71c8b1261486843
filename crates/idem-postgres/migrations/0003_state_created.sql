-- Operators list the records stuck 'processing', newest first, and count the records by state
-- (`Store::list`, `Store::census`). Without this index both would read every record; with it a
-- page of one state's records is a walk down that state's entries from where the page starts,
-- and the processing records are counted from their own range.
--
-- Built in the migration's transaction, which blocks writes to the table while it runs: on a
-- large table, migrate when the service is quiet.
CREATE INDEX "{table}_state_created" ON "{schema}"."{table}" (state, created_at);
