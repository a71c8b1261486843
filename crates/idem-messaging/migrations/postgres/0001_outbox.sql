-- The outbox: messages enqueued in business transactions, waiting for a relay to publish them
-- (state 'pending'), and those that kept failing (state 'dead'). A message is deleted once the
-- broker has confirmed it. The store fills in the validated schema and table names before this
-- runs.
--
-- `seq` orders the messages of one ordering key: it is taken from the sequence at enqueue, so a
-- message enqueued after another committed has a higher one. The sequence must keep CACHE 1
-- (the default): cached values would be handed out of order across sessions.
--
-- `available_at` is when the message may be claimed next: its enqueue time, then the end of the
-- current claim's lease (a relay that dies leaves it to the others), or the end of its backoff
-- after a failed attempt. `claim` is the token of the claim that holds it: only that claim may
-- mark it sent. `attempts` counts the claims that tried to publish it.
CREATE SEQUENCE "{schema}"."{table}_seq" AS bigint;

CREATE TABLE "{schema}"."{table}" (
    id            uuid        PRIMARY KEY,
    seq           bigint      NOT NULL,
    destination   text        NOT NULL,
    ordering_key  text,
    header_names  text[]      NOT NULL,
    header_values text[]      NOT NULL,
    payload       bytea       NOT NULL,
    state         text        NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    available_at  timestamptz NOT NULL,
    claim         uuid,
    claimed_by    text,
    enqueued_at   timestamptz NOT NULL,
    dead_at       timestamptz,
    last_error    text,
    CONSTRAINT "{table}_state" CHECK (
        (state = 'pending' AND dead_at IS NULL)
        OR (state = 'dead' AND dead_at IS NOT NULL AND claim IS NULL)
    ),
    CONSTRAINT "{table}_headers" CHECK (
        cardinality(header_names) = cardinality(header_values)
    )
);

-- Claims take the due messages, oldest first.
CREATE INDEX "{table}_available" ON "{schema}"."{table}" (available_at)
    WHERE state = 'pending';

-- With ordering on, a message waits while an earlier one of its key is pending.
CREATE INDEX "{table}_ordering" ON "{schema}"."{table}" (ordering_key, seq)
    WHERE state = 'pending' AND ordering_key IS NOT NULL;
