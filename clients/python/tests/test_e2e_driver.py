"""The end-to-end driver against a small local server: one line per payment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

DRIVER = Path(__file__).resolve().parents[1] / "e2e_payments.py"


class Payments(BaseHTTPRequestHandler):
    """Answers 503 to the first attempt of every key, then 201 with the payment (a replay for a
    key already paid); payment 3 is not found, payment 4's outcome is unknown."""

    seen: Dict[str, int] = {}
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        key = self.headers["idempotency-key"]
        with self.lock:
            count = self.seen.get(key, 0) + 1
            self.seen[key] = count
        payment = json.loads(body)["payment"]
        if payment.endswith("-3"):
            status, answer, extra = 404, b"not found", {}
        elif payment.endswith("-4"):
            status, answer = 500, b'{"type":"urn:idem:problem:outcome-unknown"}'
            extra = {"Content-Type": "application/problem+json"}
        elif count == 1:
            status, answer, extra = 503, b"", {"Retry-After": "0"}
        else:
            status, answer, extra = 201, json.dumps({"payment": payment}).encode(), {}
            if count > 2:
                extra = {"Idempotent-Replayed": "true"}
        self.send_response(status)
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Tuple[str, Dict[str, int]]]:
    Payments.seen = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Payments)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", Payments.seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_driver_prints_one_line_per_payment(server: Tuple[str, Dict[str, int]]) -> None:
    url, seen = server
    env = dict(
        os.environ,
        IDEM_E2E_URL=url + "/",
        IDEM_E2E_PAYMENTS="6",
        IDEM_E2E_PREFIX="pay",
        IDEM_E2E_CONCURRENCY="2",
    )
    done = subprocess.run(
        [sys.executable, str(DRIVER)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines: List[Dict[str, object]] = [json.loads(line) for line in done.stdout.splitlines()]
    by_payment = {str(line["payment"]): line for line in lines}
    assert len(lines) == 6
    assert sorted(by_payment) == [f"pay-{i}" for i in range(6)]
    for i in (0, 1, 2, 5):
        assert by_payment[f"pay-{i}"] == {
            "payment": f"pay-{i}",
            "status": 201,
            "attempts": 2,
            "replayed": False,
            "answer": f"pay-{i}",
        }
    assert by_payment["pay-3"] == {
        "payment": "pay-3",
        "status": 404,
        "attempts": 1,
        "replayed": False,
        "answer": None,
    }
    assert by_payment["pay-4"] == {"payment": "pay-4", "error": "OutcomeUnknown", "attempts": 1}
    assert sorted(seen.values()) == [1, 1, 2, 2, 2, 2]
