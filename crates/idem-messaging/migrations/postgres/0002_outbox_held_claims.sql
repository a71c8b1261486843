-- The relay now holds its claim as a transaction: the rows stay locked while the batch is
-- published, and the claim's lease is the transaction's idle timeout. The claim token and the
-- relay's name are no longer written on the rows. `attempts` counts the attempts the broker
-- refused.
ALTER TABLE "{schema}"."{table}" DROP CONSTRAINT "{table}_state";
ALTER TABLE "{schema}"."{table}" DROP COLUMN claim, DROP COLUMN claimed_by;
ALTER TABLE "{schema}"."{table}" ADD CONSTRAINT "{table}_state" CHECK (
    (state = 'pending' AND dead_at IS NULL) OR (state = 'dead' AND dead_at IS NOT NULL)
);
