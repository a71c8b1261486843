"""Writes to idem's outbox on MySQL or MariaDB from Python, with PyMySQL, as `Outbox::enqueue`
does.

    pymysql_writer.py mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE < plan.json

The outbox is DATABASE.idem_outbox, the business table DATABASE.orders; outbox_plan.py describes
the plan and the output.
"""

import sys
from urllib.parse import unquote, urlsplit

import pymysql

from outbox_plan import Message, enqueued, headers_json, read_plan, uuid7

# outbox_enqueue.sql's statement: `seq` left to AUTO_INCREMENT, both times the server's, in UTC.
ENQUEUE = """
INSERT INTO idem_outbox (
    id, destination, ordering_key, headers, payload, state, available_at, enqueued_at
)
VALUES (%s, %s, %s, %s, %s, 'pending', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))
"""


def enqueue(cursor: pymysql.cursors.Cursor, message: Message) -> None:
    message_id = uuid7()
    cursor.execute(
        ENQUEUE,
        (
            message_id.bytes,  # BINARY(16): the UUID's 16 bytes, in order
            message.destination,
            message.ordering_key,
            headers_json(message.headers),
            message.payload,
        ),
    )
    enqueued(message_id)


def main() -> None:
    (url,) = sys.argv[1:]
    parts = urlsplit(url)
    connection = pymysql.connect(
        host=parts.hostname,
        port=parts.port or 3306,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        database=parts.path.lstrip("/"),
        charset="utf8mb4",
        autocommit=False,
    )
    with connection:
        for transaction in read_plan():
            connection.begin()
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "INSERT INTO orders (id, state) VALUES (%s, %s)",
                        (transaction.order, transaction.state),
                    )
                    for message in transaction.messages:
                        enqueue(cursor, message)
            except BaseException:
                connection.rollback()
                raise
            if transaction.commit:
                connection.commit()
            else:
                connection.rollback()


if __name__ == "__main__":
    main()
