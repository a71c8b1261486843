#!/usr/bin/env python3
"""The order API: `POST /orders` writes the order and its `order.placed` event in one SQLite
transaction, the event as a row of idem's outbox, which `idem relay` publishes.

    order_api.py --port PORT --db orders.db --destination QUEUE [--work-ms 30]

Body: {"order_id": "...", "item": "...", "quantity": N}; answer: 201 with the order as stored.
The outbox table (main.idem_outbox) is `idem relay --migrate`'s; this program only inserts into
it, as docs/messaging.md ("Writing to the outbox from any language") says a writer does. The
request's `traceparent` and `tracestate` go into the message's headers, so that the relay, the
deliverer and the consumer's gateway continue the caller's trace.

The API is not idempotent by itself: two requests for one order make two orders and two events.
`idem serve` in front of it is what makes a retried POST apply once. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fault_hooks import Hold, answer_fault_request

ORDERS = """
CREATE TABLE IF NOT EXISTS orders (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id TEXT NOT NULL,          -- deliberately not UNIQUE: the gateway keeps it to one row
    item TEXT NOT NULL,
    quantity INTEGER NOT NULL,
    message_id TEXT NOT NULL,        -- the outbox message enqueued with it
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)
"""

# outbox_enqueue.sql's statement: `seq` left to AUTOINCREMENT; both times SQLite's own clock, in
# milliseconds since the Unix epoch.
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


def uuid7() -> uuid.UUID:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, the version, 74 random bits."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    value = value & ~(0xF << 76) | 0x7 << 76
    value = value & ~(0x3 << 62) | 0x2 << 62
    return uuid.UUID(int=value)


def headers_json(pairs: list[tuple[str, str]]) -> str:
    """The `headers` column: a JSON array of [name, value] pairs, compact, as idem writes it."""
    return json.dumps([[name, value] for name, value in pairs], ensure_ascii=False,
                      separators=(",", ":"))


def connect(path: str) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; each one is begun here, BEGIN IMMEDIATE
    # taking the write lock at once (waiting up to the timeout for the relay's short ones).
    connection = sqlite3.connect(path, isolation_level=None, timeout=10.0)
    connection.execute("PRAGMA journal_mode=WAL")
    return connection


class Api:
    def __init__(self, db: str, destination: str, work_seconds: float) -> None:
        self.db = db
        self.destination = destination
        self.work_seconds = work_seconds
        self.hold = Hold()

    def place(self, order: dict, trace_headers: list[tuple[str, str]]) -> dict:
        """Writes the order and its event in one transaction; returns the order as stored."""
        message_id = str(uuid7())  # TEXT: lower-case, hyphenated
        payload = {"order_id": order["order_id"], "item": order["item"],
                   "quantity": order["quantity"]}
        headers = [("content-type", "application/json"), ("ce-type", "order.placed"),
                   *trace_headers]
        connection = connect(self.db)
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                seq = connection.execute(
                    "INSERT INTO orders (order_id, item, quantity, message_id) VALUES (?, ?, ?, ?)",
                    (order["order_id"], order["item"], order["quantity"], message_id),
                ).lastrowid
                connection.execute(ENQUEUE, (
                    message_id,
                    self.destination,
                    order["order_id"],  # the ordering key; unused while the relay's ordering is off
                    headers_json(headers),
                    json.dumps(payload, separators=(",", ":")).encode(),  # bytes: a BLOB
                ))
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
        finally:
            connection.close()
        return {**payload, "seq": seq, "message_id": message_id}


def handler_for(api: Api) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the gateway pools its connections

        def log_message(self, *_: object) -> None:
            pass

        def answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def do_GET(self) -> None:
            if not answer_fault_request(self, api.hold):
                self.answer(404, {"error": "not found"})

        def do_POST(self) -> None:
            if answer_fault_request(self, api.hold):
                return
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path != "/orders":
                self.answer(404, {"error": "not found"})
                return
            try:
                order = json.loads(body)
                order = {"order_id": str(order["order_id"]), "item": str(order["item"]),
                         "quantity": int(order["quantity"])}
            except (ValueError, KeyError, TypeError) as error:
                self.answer(400, {"error": f"not an order: {error}"})
                return
            trace = [(name, self.headers[name]) for name in ("traceparent", "tracestate")
                     if self.headers.get(name)]
            time.sleep(api.work_seconds)  # checking stock, pricing: what makes an order take time
            api.hold.enter()
            try:
                placed = api.place(order, trace)
                self.answer(201, placed)
            finally:
                api.hold.leave()
            print(f"order {placed['order_id']} placed as #{placed['seq']}, "
                  f"message {placed['message_id']} (key {self.headers.get('idempotency-key')})",
                  file=sys.stderr, flush=True)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("ORDER_API_PORT", "3000")))
    parser.add_argument("--db", default=os.environ.get("ORDER_API_DB", "orders.db"))
    parser.add_argument("--destination", default=os.environ.get("ORDER_API_DESTINATION", "orders"),
                        help="the outbox messages' destination: the RabbitMQ queue")
    parser.add_argument("--work-ms", type=float, default=30.0,
                        help="the time an order takes before its transaction")
    args = parser.parse_args()

    connection = connect(args.db)
    connection.execute(ORDERS)
    outbox = connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                                "AND name = 'idem_outbox'").fetchone()
    connection.close()
    if not outbox:
        sys.exit(f"error: {args.db} has no idem_outbox table: run `idem relay --migrate "
                 f"--store sqlite://{os.path.abspath(args.db)} …` first")
    api = Api(args.db, args.destination, args.work_ms / 1000)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(api))
    server.daemon_threads = True
    print(f"order API on 127.0.0.1:{args.port}, pid {os.getpid()}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
