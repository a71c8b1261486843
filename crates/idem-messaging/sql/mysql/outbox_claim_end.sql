-- Ends a relay's claim transaction: the placeholder below is COMMIT, or ROLLBACK to give the
-- whole batch back. The session's own `wait_timeout` is put back first, once the claim has made
-- it through its idle wait: the connection goes back to the pool as it came.
SET SESSION wait_timeout = @idem_relay_wait_timeout;
{end}
