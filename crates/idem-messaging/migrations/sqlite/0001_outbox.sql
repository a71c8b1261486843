-- The outbox: messages enqueued in business transactions, waiting for a relay to publish them
-- (state 'pending'), and those that kept failing (state 'dead'). A message is deleted once the
-- broker has confirmed it. The store fills in the validated schema and table names before this
-- runs. Times are milliseconds since the Unix epoch.
--
-- `seq` orders the messages of one ordering key. SQLite has one writer at a time, so a message
-- enqueued after another committed has a higher one; AUTOINCREMENT never hands out a number
-- again, even once the highest message was deleted.
--
-- `available_at` is when the message may be claimed next: its enqueue time, then the end of the
-- lease of the claim that holds it (a relay that dies leaves it to the others then), or the end
-- of its backoff after a failed attempt. `claim` is the token of the claim that holds it: only
-- that claim may mark it sent, record its failure or give it back. `attempts` counts the attempts
-- the broker refused. `headers` is a JSON array of `[name, value]` pairs.
CREATE TABLE "{schema}"."{table}" (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT    NOT NULL UNIQUE,
    destination  TEXT    NOT NULL,
    ordering_key TEXT,
    headers      TEXT    NOT NULL,
    payload      BLOB    NOT NULL,
    state        TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    available_at INTEGER NOT NULL,
    claim        TEXT,
    claimed_by   TEXT,
    enqueued_at  INTEGER NOT NULL,
    dead_at      INTEGER,
    last_error   TEXT,
    CONSTRAINT "{table}_state" CHECK (
        (state = 'pending' AND dead_at IS NULL)
        OR (state = 'dead' AND dead_at IS NOT NULL AND claim IS NULL)
    )
);

-- Claims take the due messages, oldest first.
CREATE INDEX "{schema}"."{table}_available" ON "{table}" (available_at)
    WHERE state = 'pending';

-- With ordering on, a message waits while an earlier one of its key is pending.
CREATE INDEX "{schema}"."{table}_ordering" ON "{table}" (ordering_key, seq)
    WHERE state = 'pending' AND ordering_key IS NOT NULL;

-- A claim's settlement finds its messages by token.
CREATE INDEX "{schema}"."{table}_claim" ON "{table}" (claim)
    WHERE claim IS NOT NULL;
