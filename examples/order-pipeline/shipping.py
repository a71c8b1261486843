#!/usr/bin/env python3
"""The shipping service: receives each `order.placed` event as `idem deliver` posts it (a
CloudEvent in HTTP binary mode, through `idem serve`) and ships the order: one shipment row per
request, in its own SQLite file.

    shipping.py --port PORT --db shipping.db

What it receives: the outbox message's payload as the body ({"order_id", "item", "quantity"}),
the CloudEvent's attributes as `ce-*` headers (`ce-id`: the delivery's key, `ce-type`:
`order.placed` as the producer set it, `ce-source`: the queue), the `Idempotency-Key` (the
outbox message's id, as an sf-string when it is not a bare token) and the trace's
`traceparent`. It answers 201 with the shipment.

It is not idempotent by itself: every request it gets ships again. `idem serve` in front of it,
keyed by the `Idempotency-Key` that `idem deliver` derives from the message, makes each message
ship once however many copies arrive. Every request is also counted in `requests` (committed
before the shipment's transaction), to show how many copies reached it. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fault_hooks import Hold, answer_fault_request

SCHEMA = """
CREATE TABLE IF NOT EXISTS shipments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id TEXT NOT NULL,          -- deliberately not UNIQUE: the gateway keeps it to one row
    item TEXT NOT NULL,
    quantity INTEGER NOT NULL,
    event_id TEXT NOT NULL,          -- ce-id
    idempotency_key TEXT NOT NULL,
    traceparent TEXT,
    shipped_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT,
    received_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
"""


def connect(path: str) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, timeout=10.0)
    connection.execute("PRAGMA journal_mode=WAL")
    return connection


def unquote(key: str) -> str:
    """An sf-string's value (`"…"`, with `\\"` and `\\\\`); a bare token as it is."""
    if len(key) >= 2 and key[0] == key[-1] == '"':
        return key[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return key


def handler_for(db: str, hold: Hold, work_seconds: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

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
            if not answer_fault_request(self, hold):
                self.answer(404, {"error": "not found"})

        def do_POST(self) -> None:
            if answer_fault_request(self, hold):
                return
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            event_id = self.headers.get("ce-id")
            key = self.headers.get("idempotency-key")
            connection = connect(db)
            try:
                connection.execute("INSERT INTO requests (event_id) VALUES (?)", (event_id,))
                problems = []
                if self.headers.get("ce-specversion") != "1.0":
                    problems.append(f"ce-specversion {self.headers.get('ce-specversion')!r}")
                if self.headers.get("ce-type") != "order.placed":
                    problems.append(f"ce-type {self.headers.get('ce-type')!r}")
                if not event_id or not key or unquote(key) != event_id:
                    problems.append(f"ce-id {event_id!r} and Idempotency-Key {key!r}")
                try:
                    event = json.loads(body)
                    order_id, item, quantity = event["order_id"], event["item"], event["quantity"]
                except (ValueError, KeyError, TypeError):
                    problems.append(f"body {body[:100]!r}")
                if problems:
                    # A 4xx: idem deliver tries it --max-attempts times, then dead-letters it,
                    # and the order is reported as not shipped.
                    print(f"refused an event: {', '.join(problems)}", file=sys.stderr, flush=True)
                    self.answer(400, {"error": "not an order.placed CloudEvent",
                                      "problems": problems})
                    return
                time.sleep(work_seconds)  # booking the courier
                hold.enter()
                try:
                    connection.execute("BEGIN IMMEDIATE")
                    seq = connection.execute(
                        "INSERT INTO shipments (order_id, item, quantity, event_id, "
                        "idempotency_key, traceparent) VALUES (?, ?, ?, ?, ?, ?)",
                        (order_id, item, quantity, event_id, key,
                         self.headers.get("traceparent")),
                    ).lastrowid
                    connection.execute("COMMIT")
                    self.answer(201, {"shipment": seq, "order_id": order_id})
                finally:
                    hold.leave()
            finally:
                connection.close()
            print(f"order {order_id} shipped as #{seq} (event {event_id})", file=sys.stderr,
                  flush=True)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("SHIPPING_PORT", "3001")))
    parser.add_argument("--db", default=os.environ.get("SHIPPING_DB", "shipping.db"))
    parser.add_argument("--work-ms", type=float, default=20.0,
                        help="the time a shipment takes before its transaction")
    args = parser.parse_args()
    connection = connect(args.db)
    connection.executescript(SCHEMA)
    connection.close()
    server = ThreadingHTTPServer(("127.0.0.1", args.port),
                                 handler_for(args.db, Hold(), args.work_ms / 1000))
    server.daemon_threads = True
    print(f"shipping on 127.0.0.1:{args.port}, pid {os.getpid()}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
