"""Writes to idem's outbox on SQLite from Python, with the standard library's sqlite3, as
`Outbox::enqueue` does.

    sqlite3_writer.py DATABASE_FILE < plan.json

The outbox is main.idem_outbox, the business table main.orders; outbox_plan.py describes the
plan and the output.
"""

import sqlite3
import sys

from outbox_plan import Message, enqueued, headers_json, read_plan, uuid7

# outbox_enqueue.sql's statement: `seq` left to AUTOINCREMENT, both times the same milliseconds
# since the Unix epoch, from SQLite's clock.
ENQUEUE = """
INSERT INTO main.idem_outbox (
    id, destination, ordering_key, headers, payload, state, available_at, enqueued_at
)
VALUES (
    ?, ?, ?, ?, ?, 'pending',
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER),
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
)
"""


def enqueue(connection: sqlite3.Connection, message: Message) -> None:
    message_id = uuid7()
    connection.execute(
        ENQUEUE,
        (
            str(message_id),  # TEXT: lower-case, hyphenated
            message.destination,
            message.ordering_key,
            headers_json(message.headers),
            message.payload,  # bytes: a BLOB
        ),
    )
    enqueued(message_id)


def main() -> None:
    (path,) = sys.argv[1:]
    # isolation_level=None: no implicit transactions, each one begun here. BEGIN IMMEDIATE takes
    # the write lock at once, waiting up to the busy timeout for the relay's short transactions.
    connection = sqlite3.connect(path, isolation_level=None, timeout=10.0)
    for transaction in read_plan():
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute(
                "INSERT INTO main.orders (id, state) VALUES (?, ?)",
                (transaction.order, transaction.state),
            )
            for message in transaction.messages:
                enqueue(connection, message)
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT" if transaction.commit else "ROLLBACK")
    connection.close()


if __name__ == "__main__":
    main()
