-- The parts of streamed responses (`Store::append_part`): the execution that streams a response
-- appends it part by part, so that requests on the other processes sharing the file follow it
-- while it runs. One row per part: the record's address as `idem_records` keys it (scope, key
-- digest), the fencing token of the execution that appended it (an execution that takes the
-- record over counts its parts from 0 again, beside the older one's), and its index. A part
-- expires with its record: `expires_at` is the record's at the time of the append (milliseconds,
-- from the store's clock), and `Store::purge_expired` removes it after the expired records.
-- Completing, releasing or taking over the record leaves its parts to readers;
-- `Store::discard_parts` deletes one execution's, `Store::forget` every one of the address.
-- A rowid table, like `idem_records`, the part last: parts can be large.
CREATE TABLE idem_parts (
    scope      BLOB    NOT NULL,
    key        BLOB    NOT NULL,
    token      INTEGER NOT NULL,
    idx        INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    part       BLOB    NOT NULL,
    PRIMARY KEY (scope, key, token, idx)
);

CREATE INDEX idem_parts_expires_at ON idem_parts (expires_at);
