-- ? the claimed messages' seq (a JSON array). Deletes the messages the broker confirmed, in the
-- claim's transaction, which holds their rows locked.
--
-- The join is written in its order, by the primary key: the statement must reach no row but its
-- own, since a row it read and another relay's claim holds would make it wait, and that relay's
-- own marks wait for this claim's rows in turn (a deadlock). Left to the optimizer, a small
-- outbox would be scanned instead (and `seq IN (SELECT … FROM JSON_TABLE(…))` always is).
DELETE o
FROM JSON_TABLE(?, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS sent
STRAIGHT_JOIN {qualified} AS o FORCE INDEX (PRIMARY) ON o.seq = sent.seq
