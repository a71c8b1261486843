"""Writes to idem's outbox on PostgreSQL from Python, with psycopg 3, as `Outbox::enqueue` does.

    psycopg_writer.py POSTGRES_URL SCHEMA < plan.json

The outbox is SCHEMA.idem_outbox, the business table SCHEMA.orders; outbox_plan.py describes the
plan and the output.
"""

import sys

import psycopg

from outbox_plan import Message, enqueued, notify_channel, read_plan, uuid7

# outbox_enqueue.sql's statement: the row, its `seq` from the outbox's sequence, both times the
# statement's, and a notification the relays get when the transaction commits.
ENQUEUE = """
WITH enqueued AS (
    INSERT INTO "{schema}".idem_outbox (
        id, seq, destination, ordering_key, header_names, header_values, payload,
        state, available_at, enqueued_at
    )
    VALUES (
        %s, nextval('"{schema}".idem_outbox_seq'), %s, %s, %s::text[], %s::text[], %s,
        'pending', statement_timestamp(), statement_timestamp()
    )
    RETURNING id
)
SELECT pg_notify(%s, '') FROM enqueued
"""


def enqueue(connection: psycopg.Connection, schema: str, message: Message) -> None:
    message_id = uuid7()
    connection.execute(
        ENQUEUE.format(schema=schema),
        (
            message_id,
            message.destination,
            message.ordering_key,
            [name for name, _ in message.headers],
            [value for _, value in message.headers],
            message.payload,
            notify_channel(schema),
        ),
    )
    enqueued(message_id)


def main() -> None:
    url, schema = sys.argv[1:]
    with psycopg.connect(url, autocommit=True) as connection:
        for transaction in read_plan():
            with connection.transaction():
                connection.execute(
                    f'INSERT INTO "{schema}".orders (id, state) VALUES (%s, %s)',
                    (transaction.order, transaction.state),
                )
                for message in transaction.messages:
                    enqueue(connection, schema, message)
                if not transaction.commit:
                    raise psycopg.Rollback()  # ends the block, rolled back


if __name__ == "__main__":
    main()
