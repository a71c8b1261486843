#!/usr/bin/env python3
"""Each client makes payments through `idem serve` while a proxy loses responses: every payment
must execute exactly once, and each caller must get its own payment's answer. Then the same
payments go through the same proxy straight to the API, without idem, to show the duplicates
that the same retries make there.

    clients/e2e/payments.py --idem target/debug/idem \
        --client rust='target/debug/examples/payments' \
        --client python='~/.cache/idem-python-client/bin/python clients/python/e2e_payments.py'

Each --client is NAME=COMMAND: a driver that reads IDEM_E2E_URL, IDEM_E2E_PAYMENTS,
IDEM_E2E_PREFIX and IDEM_E2E_CONCURRENCY, sends the payments `POST /payments
{"payment": PREFIX-i, "amount": i+1}` with its client (1 s attempts), and prints one JSON line
per payment (`status`, `attempts`, `replayed` and `answer`, the payment the body names; or
`error`). The API (here, in this process) executes a payment by counting it, and holds one in
ten for 1.5 s the first time, longer than an attempt. The proxy (here too) forwards every
request, then drops the response of a share of them (--drop, 20%), with a seeded draw so that a
run can be repeated.

Exit status 0 when, for every client, every payment through idem executed once and answered its
own caller, and the run without idem showed duplicates; 1 otherwise, saying which.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOW_SECONDS = 1.5
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Quiet(BaseHTTPRequestHandler):
    """A keep-alive HTTP/1.1 handler that logs nothing."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        pass

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length", "0")))


class Serving:
    """A threaded server on a free loopback port, answering with `handler`."""

    def __init__(self, handler: type[Quiet]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Api(Serving):
    """The payments API: counts each payment's executions."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executions: Counter[str] = Counter()
        api = self

        class Handler(Quiet):
            def do_POST(self) -> None:
                payment = json.loads(self.body())["payment"]
                with api.lock:
                    api.executions[payment] += 1
                    first = api.executions[payment] == 1
                    charge = sum(api.executions.values())
                if first and payment.endswith("3"):
                    time.sleep(SLOW_SECONDS)
                answer = json.dumps({"payment": payment, "charge": f"ch_{charge}"}).encode()
                self.send_response(201)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        super().__init__(Handler)

    def counts(self, prefix: str) -> Counter[str]:
        with self.lock:
            return Counter({p: n for p, n in self.executions.items() if p.startswith(prefix + "-")})


class LossyProxy(Serving):
    """Forwards each request to `target`, then drops a share of the responses: the effect
    happened, and the caller never hears of it."""

    def __init__(self, target: str, drop: float, seed: int) -> None:
        self.target = target.removeprefix("http://")
        self.draw = random.Random(seed)
        self.lock = threading.Lock()
        self.forwarded = 0
        self.dropped = 0
        proxy = self

        class Handler(Quiet):
            def do_POST(self) -> None:
                body = self.body()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                upstream = http.client.HTTPConnection(proxy.target, timeout=60)
                try:
                    upstream.request("POST", self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    answer = response.read()
                finally:
                    upstream.close()
                with proxy.lock:
                    proxy.forwarded += 1
                    lose = proxy.draw.random() < drop
                    proxy.dropped += lose
                if lose:
                    self.close_connection = True
                    return
                try:
                    self.send_response(response.status)
                    for name, value in response.getheaders():
                        if name.lower() not in HOP_BY_HOP:
                            self.send_header(name, value)
                    self.send_header("content-length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except (BrokenPipeError, ConnectionResetError):
                    # The caller's attempt timed out first.
                    self.close_connection = True

        super().__init__(Handler)


class Gateway:
    """`idem serve` in front of the API, on an SQLite file of its own, duplicates waiting for the
    first attempt's answer (`--in-flight wait`)."""

    def __init__(self, binary: str, upstream: str, directory: str) -> None:
        self.port, admin = free_port(), free_port()
        self.log = open(os.path.join(directory, "gateway.log"), "wb")
        self.process = subprocess.Popen(
            [
                binary, "serve",
                "--upstream", upstream,
                "--listen", f"127.0.0.1:{self.port}",
                "--admin-listen", f"127.0.0.1:{admin}",
                "--store", f"sqlite://{directory}/idem.db",
                "--in-flight", "wait",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/healthz", timeout=1):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    sys.exit(f"idem serve did not start: see {self.log.name}")
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def drive(command: str, url: str, prefix: str, payments: int) -> list[dict]:
    """Runs a driver, and returns its lines."""
    env = dict(os.environ, IDEM_E2E_URL=url, IDEM_E2E_PREFIX=prefix,
               IDEM_E2E_PAYMENTS=str(payments), IDEM_E2E_CONCURRENCY="8")
    done = subprocess.run(shlex.split(os.path.expanduser(command)), env=env,
                          stdout=subprocess.PIPE, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"the driver `{command}` exited with {done.returncode}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idem", required=True, help="the idem binary")
    parser.add_argument("--client", action="append", required=True, metavar="NAME=COMMAND")
    parser.add_argument("--payments", type=int, default=200)
    parser.add_argument("--drop", type=float, default=0.2, help="share of responses dropped")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    api = Api()
    failures: list[str] = []
    rows = []
    with tempfile.TemporaryDirectory(prefix="idem-clients-e2e-") as directory:
        gateway = Gateway(args.idem, api.url, directory)
        try:
            for number, client in enumerate(args.client):
                name, _, command = client.partition("=")
                for mode, target in (("idem", gateway.url), ("without idem", api.url)):
                    prefix = f"{name}-{'idem' if mode == 'idem' else 'naive'}"
                    proxy = LossyProxy(target, args.drop, args.seed + number)
                    started = time.monotonic()
                    print(f"{name}: {args.payments} payments {mode} …", file=sys.stderr, flush=True)
                    try:
                        lines = drive(command, proxy.url, prefix, args.payments)
                    finally:
                        proxy.stop()
                    seconds = time.monotonic() - started
                    counts = api.counts(prefix)
                    expected = {f"{prefix}-{i}" for i in range(args.payments)}
                    answered = {l["payment"] for l in lines
                                if l.get("status") == 201 and l.get("answer") == l["payment"]}
                    once = sum(1 for p in expected if counts[p] == 1)
                    duplicated = sum(1 for p in expected if counts[p] > 1)
                    rows.append((name, mode, len(answered), once, duplicated,
                                 sum(counts.values()), proxy.dropped,
                                 max((l.get("attempts") or 0 for l in lines), default=0), seconds))
                    if mode == "idem":
                        if len(lines) != args.payments or answered != expected:
                            wrong = sorted(expected - answered)[:5]
                            failures.append(f"{name}: {args.payments - len(answered & expected)} "
                                            f"payments without their own answer, e.g. {wrong}")
                        if once != args.payments:
                            wrong = sorted(p for p in expected if counts[p] != 1)[:5]
                            failures.append(f"{name}: {args.payments - once} payments not executed "
                                            f"exactly once through idem, e.g. {wrong}")
                    elif duplicated == 0:
                        failures.append(f"{name}: no duplicate without idem: the faults did not bite")
        finally:
            gateway.stop()

    header = ("client", "route", "answered", "executed once", "duplicated", "executions",
              "responses dropped", "most attempts", "seconds")
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for row in rows:
        print("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in row) + " |")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
