-- The outbox: messages enqueued in business transactions, waiting for a relay to publish them
-- (state 'pending'), and those that kept failing (state 'dead'). A message is deleted once the
-- broker has confirmed it. Times are the database server's, in UTC.
--
-- `seq` orders the messages of one ordering key: InnoDB hands out AUTO_INCREMENT values in the
-- order of the inserts, and keeps its counter across restarts (MySQL 8.0, MariaDB 10.2.4), so a
-- message enqueued after another committed has a higher one. It is the primary key: the relay
-- finds the messages it claimed by it.
--
-- `available_at` is when the message may be claimed next: its enqueue time, or the end of its
-- backoff after a failed attempt. A relay holds the messages it claimed as row locks, in a
-- transaction, so nothing about a claim is written on the rows. `attempts` counts the attempts
-- the broker refused. `headers` is a JSON array of `[name, value]` pairs; `id` the UUID's 16
-- bytes. No partial indexes on MySQL: the state leads the indexes instead.
CREATE TABLE {qualified} (
    seq          BIGINT       NOT NULL AUTO_INCREMENT,
    id           BINARY(16)   NOT NULL,
    destination  TEXT         NOT NULL,
    ordering_key VARCHAR(255) COLLATE utf8mb4_bin,
    headers      MEDIUMTEXT   NOT NULL,
    payload      LONGBLOB     NOT NULL,
    state        VARCHAR(7)   CHARACTER SET ascii NOT NULL,
    attempts     INT          NOT NULL DEFAULT 0,
    available_at DATETIME(6)  NOT NULL,
    enqueued_at  DATETIME(6)  NOT NULL,
    dead_at      DATETIME(6),
    last_error   MEDIUMTEXT,
    PRIMARY KEY (seq),
    UNIQUE INDEX `{table}_id` (id),
    -- Claims take the due messages, oldest first.
    INDEX `{table}_available` (state, available_at),
    -- With ordering on, a message waits while an earlier one of its key is pending.
    INDEX `{table}_ordering` (state, ordering_key, seq),
    CONSTRAINT `{table}_state` CHECK (
        (state = 'pending' AND dead_at IS NULL) OR (state = 'dead' AND dead_at IS NOT NULL)
    )
) ENGINE = InnoDB DEFAULT CHARACTER SET = utf8mb4;
