-- $1 row addresses (`ctid`, as the claim returned them). Deletes the messages the broker
-- confirmed, in the claim's transaction: the rows are locked by it, so their addresses have not
-- changed since the claim read them (a TID scan, cheaper than the primary key's index).
DELETE FROM "{schema}"."{table}"
WHERE ctid = ANY($1::tid[])
