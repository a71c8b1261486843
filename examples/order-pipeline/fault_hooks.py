"""The one hook the fault script needs inside the two Python services: a hold at the door of
their transaction, so that a SIGKILL lands while requests are in flight and none of them is
between its commit and its answer.

A gateway cannot know whether an upstream that died mid-request committed: it releases the key
and the retry executes again (docs/gateway.md, "What the gateway guarantees, and what it
cannot"). That window, from the commit to the answer on the wire, is what the hold keeps the
kill out of; the README says what closes it for real.

    POST /fault/hold     new requests wait before their transaction; answers once none is inside
                         one: {"parked": N, "inside": 0}
    GET  /fault/state    {"parked": N, "inside": M}
    POST /fault/release  the parked requests go on

Only the fault script calls these, straight at the service's port.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler


class Hold:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._holding = False
        self.parked = 0
        self.inside = 0

    def enter(self) -> None:
        """Called before the transaction: waits while the hold is on, then counts the request as
        inside until `leave`."""
        with self._condition:
            if self._holding:
                self.parked += 1
                while self._holding:
                    self._condition.wait()
                self.parked -= 1
            self.inside += 1

    def leave(self) -> None:
        """Called once the answer is written (or the request failed)."""
        with self._condition:
            self.inside -= 1
            self._condition.notify_all()

    def hold(self, timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        with self._condition:
            self._holding = True
            while self.inside and time.monotonic() < deadline:
                self._condition.wait(0.05)
            return self.state()

    def release(self) -> dict:
        with self._condition:
            self._holding = False
            self._condition.notify_all()
            return self.state()

    def state(self) -> dict:
        return {"parked": self.parked, "inside": self.inside, "holding": self._holding}


def answer_fault_request(handler: BaseHTTPRequestHandler, hold: Hold) -> bool:
    """Answers `/fault/…` on `handler`; False for any other path."""
    if not handler.path.startswith("/fault/"):
        return False
    action = handler.path[len("/fault/"):]
    if handler.command == "POST" and action == "hold":
        state = hold.hold()
    elif handler.command == "POST" and action == "release":
        state = hold.release()
    elif handler.command == "GET" and action == "state":
        state = hold.state()
    else:
        handler.send_error(404)
        return True
    length = int(handler.headers.get("content-length") or 0)
    if length:
        handler.rfile.read(length)
    body = json.dumps(state).encode()
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
    return True
