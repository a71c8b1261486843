"""What the Python outbox writers share: the plan they run, and the values idem's
`Outbox::enqueue` computes that a writer in another language computes itself (a UUIDv7, the
headers' JSON, PostgreSQL's notification channel). See docs/messaging.md, "Writing to the
outbox from any language".

The plan is JSON on standard input: a list of business transactions, each
`{"order": ID, "state": TEXT, "commit": BOOL, "messages": [MESSAGE, ...]}`, a message being
`{"destination": TEXT, "ordering_key": TEXT or null, "headers": [[NAME, VALUE], ...],
"payload": BASE64}`. A writer runs them in order: each inserts its order into `orders` and
enqueues its messages in one transaction, then commits it or rolls it back. It prints each
message's id, one a line, in the plan's order (those it rolled back too).
"""

import base64
import json
import os
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple


class Message:
    def __init__(self, raw: Dict[str, Any]) -> None:
        self.destination: str = raw["destination"]
        self.ordering_key: Optional[str] = raw["ordering_key"]
        self.headers: List[Tuple[str, str]] = [(name, value) for name, value in raw["headers"]]
        self.payload: bytes = base64.b64decode(raw["payload"])


class Transaction:
    def __init__(self, raw: Dict[str, Any]) -> None:
        self.order: int = raw["order"]
        self.state: str = raw["state"]
        self.commit: bool = raw["commit"]
        self.messages = [Message(message) for message in raw["messages"]]


def read_plan() -> List[Transaction]:
    return [Transaction(transaction) for transaction in json.load(sys.stdin)]


def enqueued(message_id: uuid.UUID) -> None:
    print(message_id, flush=True)


def uuid7() -> uuid.UUID:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, the version, 74 random bits."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # variant 0b10
    return uuid.UUID(int=value)


def headers_json(headers: List[Tuple[str, str]]) -> str:
    """The `headers` column on SQLite and MySQL, byte for byte as idem writes it: a JSON array
    of `[name, value]` pairs, no spaces, non-ASCII characters as they are."""
    return json.dumps([[name, value] for name, value in headers], ensure_ascii=False,
                      separators=(",", ":"))


def notify_channel(schema: str, table: str = "idem_outbox") -> str:
    """The channel PostgreSQL relays listen on: `idem_outbox_` and the 64-bit FNV-1a hash of
    `schema.table`, in 16 hex digits."""
    digest = 0xCBF29CE484222325
    for byte in f"{schema}.{table}".encode():
        digest = ((digest ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"idem_outbox_{digest:016x}"
