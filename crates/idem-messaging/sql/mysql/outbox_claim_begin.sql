-- Begins a relay's claim transaction, with the lease in whole seconds in the placeholder below.
--
-- READ COMMITTED, for this transaction only: the claim locks the rows it takes and no gap
-- between index records, so the business transactions' enqueues never wait for a claim held
-- while its batch is published (REPEATABLE READ, the default, would lock the gap they insert in).
--
-- The lease is the session's `wait_timeout`: a claim whose session stays idle that long between
-- two statements (a relay that hangs) is ended by the server, which closes the connection and
-- rolls the claim back. The session's own value is kept in a variable of the session, and put
-- back when the claim ends (outbox_claim_end.sql).
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET @idem_relay_wait_timeout = @@SESSION.wait_timeout, SESSION wait_timeout = {lease};
START TRANSACTION
