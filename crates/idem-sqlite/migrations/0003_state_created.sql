-- Operators list the records stuck `processing`, newest first, and count the records by state
-- (`Store::list`, `Store::census`). Without this index both would read every record; with it a
-- page of one state's records is a walk down that state's entries from where the page starts,
-- and the processing records are counted from their own range.
CREATE INDEX idem_records_state_created ON idem_records (state, created_at);
