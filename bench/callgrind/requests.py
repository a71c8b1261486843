#!/usr/bin/env python3
"""The gateway's own instructions per request, counted by callgrind: a figure that does not move
with the machine's load, for comparing two builds of one change (the load harness's BASELINE
measures the same in requests per second, on a quiet machine).

    bench/callgrind/requests.py IDEM [IDEM...]

Each IDEM is an `idem` binary (say, `cargo build --release -p idem-gateway` of the commit before
a change, copied aside, and of the change). For each one it starts an upstream (IDEM_UPSTREAM,
by default `idem-bench-upstream` beside the first binary), runs `idem serve --store memory://`
under `valgrind --tool=callgrind`, sends WARMUP requests, zeroes the counters, sends REQUESTS
more over one kept-alive connection, and dumps the counters: the instructions (user space, the
gateway's process only) divided by REQUESTS. Two kinds of request, as the load harness sends
them: a plain one (no key: the proxy alone) and one with a new key each (the memory store).

Prints a markdown table, one row per kind, one column per binary, and each column's ratio to the
first. Needs valgrind (Debian's package).
"""

import http.client
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import uuid

WARMUP = int(os.environ.get("WARMUP", "200"))
REQUESTS = int(os.environ.get("REQUESTS", "2000"))
BODY = b'{"amount": 1000, "currency": "eur", "source": "tok_visa", "description": "load"}'


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(port: int, process: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"callgrind: {what} exited with {process.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"callgrind: {what} is not listening on {port} after {timeout:.0f} s")


def send(port: int, count: int, keyed: bool) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for _ in range(count):
        headers = {"Content-Type": "application/json", "Authorization": "Bearer sk_test_load"}
        if keyed:
            headers["Idempotency-Key"] = str(uuid.uuid4())
        connection.request("POST", "/v1/charges", body=BODY, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 201:
            sys.exit(f"callgrind: the gateway answered {response.status}, not 201")
    connection.close()


def instructions(out: pathlib.Path) -> int:
    """The `summary:` (or `totals:`) line of the last dump callgrind wrote for the process."""
    dumps = sorted(out.parent.glob(out.name + "*"), key=lambda path: path.stat().st_mtime)
    for line in dumps[-1].read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    sys.exit(f"callgrind: no total in {dumps[-1]}")


def measure(idem: str, upstream_port: int, keyed: bool, work: pathlib.Path) -> float:
    port, admin = free_port(), free_port()
    out = work / f"callgrind.{uuid.uuid4().hex}"
    gateway = subprocess.Popen(
        [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", idem, "serve",
            "--store", "memory://", "--upstream", f"http://127.0.0.1:{upstream_port}",
            "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    try:
        wait_for(port, gateway, "the gateway under callgrind")
        send(port, WARMUP, keyed)
        subprocess.run(["callgrind_control", "--zero", str(gateway.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        send(port, REQUESTS, keyed)
        subprocess.run(["callgrind_control", "--dump", str(gateway.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return instructions(out) / REQUESTS
    finally:
        gateway.terminate()
        gateway.wait()


def main() -> None:
    binaries = sys.argv[1:]
    if not binaries:
        sys.exit(__doc__)
    upstream_bin = os.environ.get(
        "IDEM_UPSTREAM", str(pathlib.Path(binaries[0]).parent / "idem-bench-upstream")
    )
    upstream_port = free_port()
    upstream = subprocess.Popen([upstream_bin, f"127.0.0.1:{upstream_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = {"plain proxy (no key)": [], "memory store, new keys": []}
    try:
        wait_for(upstream_port, upstream, "the upstream")
        with tempfile.TemporaryDirectory() as work:
            for idem in binaries:
                for kind, keyed in zip(rows, (False, True)):
                    per_request = measure(idem, upstream_port, keyed, pathlib.Path(work))
                    print(f"callgrind: {idem}: {kind}: {per_request:,.0f} instructions per "
                          "request", file=sys.stderr)
                    rows[kind].append(per_request)
    finally:
        upstream.terminate()
        upstream.wait()
    print(f"Instructions per request under callgrind ({REQUESTS} requests after {WARMUP}; "
          f"`bench/callgrind/requests.py {' '.join(binaries)}`, {time.strftime('%Y-%m-%d')})\n")
    header = " | ".join(f"`{b}`" for b in binaries)
    ratios = " | ".join(f"`{b}` ÷ `{binaries[0]}`" for b in binaries[1:])
    print(f"| request | {header} |{' ' + ratios + ' |' if ratios else ''}")
    print("|---|" + "---:|" * (2 * len(binaries) - 1))
    for kind, values in rows.items():
        cells = " | ".join(f"{value:,.0f}" for value in values)
        ratio_cells = " | ".join(f"{value / values[0]:.3f}" for value in values[1:])
        print(f"| {kind} | {cells} |{' ' + ratio_cells + ' |' if ratio_cells else ''}")


if __name__ == "__main__":
    main()
