#!/usr/bin/env python3
"""The gateway's own instructions per request, counted by callgrind: a figure that does not move
with the machine's load, for comparing two builds of one change (the load harness's BASELINE
measures the same in requests per second, on a quiet machine).

    bench/callgrind/requests.py IDEM [IDEM...]
    STORES="sqlite postgres mysql redis" NGINX=/usr/sbin/nginx bench/callgrind/requests.py IDEM [IDEM...]

Each IDEM is an `idem` binary (say, `cargo build --release -p idem-gateway` of the commit before
a change, copied aside, and of the change). For each one it starts an upstream (IDEM_UPSTREAM,
by default `idem-bench-upstream` beside the first binary), runs `idem serve` under `valgrind
--tool=callgrind`, sends WARMUP requests, zeroes the counters, sends REQUESTS more over one
kept-alive connection (CONNECTIONS connections at once for the stores of STORES), and dumps the
counters: the instructions (user space, every thread of the gateway's process) divided by
REQUESTS. The kinds of request, as the load harness sends them: a plain one (no key: the proxy
alone), one with a new key each and one replayed key on the memory store (`memory://`), and,
for each store named in STORES, one with a new key each on it:

- `sqlite`: a new file in a scratch directory;
- `postgres`: a schema of its own, migrated with `idem migrate`, on the database of
  IDEM_TEST_POSTGRES_URL (without TLS);
- `mysql`: a table of its own (`?table=`), migrated with `idem migrate`, in the database of
  IDEM_TEST_MYSQL_URL (without TLS);
- `redis`: a key prefix of its own on the server of IDEM_TEST_REDIS_URL.

The schema, the tables and the keys are removed after each measurement (with `psql`, `mariadb`
or `mysql`, and `redis-cli`).

With NGINX (the path of an `nginx` binary) it counts nginx forwarding the plain request too,
configured as the load harness's but as one process (`master_process off`), for the plain
request's ratio to it. With HYPER_PROXY (the path of `idem-bench-hyper-proxy`) it counts the
least a proxy on hyper does with the same request: hyper's server, one upstream connection per
client connection on hyper's client, nothing else; the floor of the gateway's plain proxy.

Prints a markdown table, one row per kind, one column per binary, and each column's ratio to the
first. With KEEP (a directory), each count's callgrind file is kept there, named after the
binary and the kind of request, for `callgrind_annotate --inclusive=yes`. Needs valgrind
(Debian's package).
"""

import http.client
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from typing import Callable

WARMUP = int(os.environ.get("WARMUP", "200"))
REQUESTS = int(os.environ.get("REQUESTS", "2000"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "1"))
STORES = os.environ.get("STORES", "").split()
KEEP = os.environ.get("KEEP")
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


def send(port: int, count: int, key: str) -> None:
    """`count` requests over one connection; `key` is "none", "unique" or "same"."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    expected = 200 if key == "none" else 201
    for _ in range(count):
        headers = {"Content-Type": "application/json", "Authorization": "Bearer sk_test_load"}
        if key == "unique":
            headers["Idempotency-Key"] = str(uuid.uuid4())
        elif key == "same":
            headers["Idempotency-Key"] = "callgrind-replayed"
        connection.request("POST", "/v1/charges", body=BODY, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status not in (200, 201):
            sys.exit(f"callgrind: answered {response.status}, not 2xx")
    connection.close()


def send_all(port: int, count: int, key: str, connections: int) -> None:
    if connections == 1:
        send(port, count, key)
        return
    threads = [threading.Thread(target=send, args=(port, count // connections, key))
               for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def last_dump(out: pathlib.Path) -> pathlib.Path:
    """The last dump callgrind wrote for the process whose output file is `out`."""
    return max(out.parent.glob(out.name + "*"), key=lambda path: path.stat().st_mtime)


def instructions(dump: pathlib.Path) -> int:
    """The `summary:` (or `totals:`) line of a callgrind dump."""
    for line in dump.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    sys.exit(f"callgrind: no total in {dump}")


def count(command: list, port: int, key: str, connections: int, work: pathlib.Path,
          what: str, name: str) -> float:
    """Runs `command` (listening on `port`) under callgrind, and counts REQUESTS of `key`."""
    out = work / f"callgrind.{uuid.uuid4().hex}"
    process = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    try:
        wait_for(port, process, what)
        send_all(port, WARMUP, key, connections)
        subprocess.run(["callgrind_control", "--zero", str(process.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        send_all(port, REQUESTS, key, connections)
        subprocess.run(["callgrind_control", "--dump", str(process.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dump = last_dump(out)
        per_request = instructions(dump) / (REQUESTS // connections * connections)
        if KEEP:
            kept = pathlib.Path(KEEP)
            kept.mkdir(parents=True, exist_ok=True)
            slug = "".join(c if c.isalnum() else "-" for c in name).strip("-")
            dump.replace(kept / f"{slug}.callgrind")
        return per_request
    finally:
        process.terminate()
        process.wait()


def store_url(idem: str, store: str, work: pathlib.Path) -> tuple[str, Callable[[], None]]:
    """A fresh store of kind `store` for one measurement, and what removes it from a shared
    server afterwards: its schema, or its prefix's keys."""
    name = f"callgrind_{uuid.uuid4().hex[:12]}"
    if store == "memory":
        return "memory://", lambda: None
    if store == "sqlite":
        return f"sqlite://{work / name}.db", lambda: None
    if store == "postgres":
        server = os.environ.get("IDEM_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
        base = server.split("?")[0]
        url = f"{base}?schema={name}&sslmode=disable"
        subprocess.run([idem, "migrate", "--store", url], check=True, stdout=subprocess.DEVNULL)
        return url, lambda: subprocess.run(
            ["psql", base, "-q", "-c", f"DROP SCHEMA IF EXISTS {name} CASCADE"],
            check=True, stdout=subprocess.DEVNULL,
            env={**os.environ, "PGOPTIONS": "-c client_min_messages=warning"})
    if store == "mysql":
        server = os.environ.get("IDEM_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
        base = server.split("?")[0]
        url = f"{base}?table={name}&ssl-mode=DISABLED"
        subprocess.run([idem, "migrate", "--store", url], check=True, stdout=subprocess.DEVNULL)
        tables = ", ".join(f"{name}{suffix}" for suffix in ("", "_tokens", "_census", "_migrations"))
        return url, lambda: mysql_client(base, f"DROP TABLE IF EXISTS {tables}")
    if store == "redis":
        server = os.environ.get("IDEM_TEST_REDIS_URL", "redis://127.0.0.1:6379")
        base = server.split("?")[0]
        return f"{base}?prefix={name}", lambda: delete_keys(base, f"{{{name}*")
    sys.exit(f"callgrind: unknown store {store!r}: expected sqlite, postgres, mysql or redis")


def mysql_client(server: str, statement: str) -> None:
    """Runs `statement` in the database of the MySQL URL `server` with the server's client."""
    url = urllib.parse.urlsplit(server)
    client = shutil.which("mariadb") or "mysql"
    subprocess.run(
        [client, "-h", url.hostname or "127.0.0.1", "-P", str(url.port or 3306),
         "-u", urllib.parse.unquote(url.username or "root"), url.path.lstrip("/"),
         "-e", statement],
        check=True, stdout=subprocess.DEVNULL,
        env={**os.environ, "MYSQL_PWD": urllib.parse.unquote(url.password or "")})


def delete_keys(server: str, pattern: str) -> None:
    """Deletes the keys of the Redis at `server` that `pattern` matches."""
    keys = subprocess.run(["redis-cli", "-u", server, "--scan", "--pattern", pattern],
                          check=True, capture_output=True, text=True).stdout.split()
    for start in range(0, len(keys), 500):
        subprocess.run(["redis-cli", "-u", server, "DEL", *keys[start:start + 500]],
                       check=True, stdout=subprocess.DEVNULL)


def measure(idem: str, upstream_port: int, store: str, key: str, connections: int,
            work: pathlib.Path, kind: str) -> float:
    port, admin = free_port(), free_port()
    url, remove = store_url(idem, store, work)
    command = [
        idem, "serve", "--store", url,
        "--upstream", f"http://127.0.0.1:{upstream_port}",
        "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
        "--log-level", "warn",
    ]
    try:
        return count(command, port, key, connections, work, "the gateway under callgrind",
                     f"{pathlib.Path(idem).name} {kind}")
    finally:
        remove()


def measure_nginx(upstream_port: int, work: pathlib.Path) -> float:
    """nginx as the load harness runs it, in one process."""
    port = free_port()
    prefix = work / "nginx"
    (prefix / "logs").mkdir(parents=True, exist_ok=True)
    (prefix / "nginx.conf").write_text(f"""
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  upstream api {{ server 127.0.0.1:{upstream_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://api;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
""")
    nginx = os.environ["NGINX"]
    command = [nginx, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"]
    return count(command, port, "none", 1, work, "nginx under callgrind", "nginx")


def measure_hyper_proxy(upstream_port: int, work: pathlib.Path) -> float:
    """`idem-bench-hyper-proxy`: hyper's two ends and nothing else."""
    port = free_port()
    command = [os.environ["HYPER_PROXY"], f"127.0.0.1:{port}", f"127.0.0.1:{upstream_port}"]
    return count(command, port, "none", 1, work, "the hyper proxy under callgrind",
                 "hyper-proxy")


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
    kinds = [
        ("plain proxy (no key)", "memory", "none", 1),
        ("memory store, new keys", "memory", "unique", 1),
        ("memory store, replays", "memory", "same", 1),
    ]
    for store in STORES:
        suffix = f", {CONNECTIONS} connections" if CONNECTIONS > 1 else ""
        kinds.append((f"{store}, new keys{suffix}", store, "unique", CONNECTIONS))
    rows = {kind: [] for kind, *_ in kinds}
    nginx = hyper_proxy = None
    try:
        wait_for(upstream_port, upstream, "the upstream")
        with tempfile.TemporaryDirectory() as work:
            if os.environ.get("NGINX"):
                nginx = measure_nginx(upstream_port, pathlib.Path(work))
                print(f"callgrind: nginx: {nginx:,.0f} instructions per request",
                      file=sys.stderr)
            if os.environ.get("HYPER_PROXY"):
                hyper_proxy = measure_hyper_proxy(upstream_port, pathlib.Path(work))
                print(f"callgrind: hyper proxy: {hyper_proxy:,.0f} instructions per request",
                      file=sys.stderr)
            for idem in binaries:
                for kind, store, key, connections in kinds:
                    per_request = measure(idem, upstream_port, store, key, connections,
                                          pathlib.Path(work), kind)
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
    if nginx is not None:
        print(f"\nnginx forwarding the plain request: {nginx:,.0f} instructions per request")
    if hyper_proxy is not None:
        print(f"\nhyper's server and client alone (`idem-bench-hyper-proxy`): {hyper_proxy:,.0f} "
              "instructions per request")


if __name__ == "__main__":
    main()
