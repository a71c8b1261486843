-- $1 row addresses (`ctid`, as the claim returned them), $2 claim token. Deletes the messages the
-- broker confirmed, if this claim still holds them: a relay whose lease ran out, and whose
-- messages another relay claimed since, changes nothing (the other relay publishes them again;
-- the consumers' inbox skips the copies).
--
-- A row is found by its address (a TID scan, cheaper than the primary key's index) and is this
-- claim's only if it still carries the claim's token: every statement that changes a claimed
-- row replaces or clears its token, so the row at an address with the token is the claimed row,
-- unchanged; a row moved or deleted since, or another row in its reused slot, does not match.
--
-- Committed without waiting for the disk, as the claim is (outbox_claim.sql): a deletion lost in
-- a crash of the database brings the messages back, to be published again.
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true)
)
DELETE FROM "{schema}"."{table}"
USING relaxed
WHERE ctid = ANY($1::tid[]) AND claim = $2
