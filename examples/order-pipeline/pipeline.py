#!/usr/bin/env python3
"""Orders through a whole pipeline while something fails at every hop, each shipped once.

    examples/order-pipeline/pipeline.py --short     # 20 orders, each fault once: under a minute
    examples/order-pipeline/pipeline.py             # 200 orders, three rounds of faults

    client ─► idem serve ─► order_api.py ══ one SQLite transaction: the order + an outbox row
              (order-gateway)                                │
                                                      idem relay ─► RabbitMQ ─► idem deliver
                                                                               │ CloudEvent,
    shipping.py ◄── idem serve ◄─────────────────────────────────────────────┘ Idempotency-Key
                    (shipping-gateway)

Clients place orders, each under its own Idempotency-Key and W3C trace, retrying until they get
an answer. The script drops some answers on the client's side, SIGKILLs the order API with
requests in flight, SIGKILLs the relay between its publishes and their confirmations, cuts the
broker's connections, SIGKILLs the deliverer and the shipping service with deliveries in flight,
restarting each. Then it checks that every order is in the order API's database once and was
shipped once, and (unless --no-traces) that each order left one trace through every hop, as the
idem processes export it over OTLP to a receiver in this script.

Standard library only, and the `idem` binary: --idem, else $IDEM_BIN, else
$CARGO_TARGET_DIR/debug/idem (CARGO_TARGET_DIR defaults to ~/.cache/idem-target), built with
cargo when it is missing. RabbitMQ at $IDEM_EXAMPLE_AMQP_URL
(amqp://guest:guest@127.0.0.1:5672/%2f by default); the script declares a queue of its own with
`rabbitmqctl` (RabbitMQ's own CLI, on the broker's host) and deletes it at the end, or uses the
existing queue --queue names. Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the example's directory

from broker_proxy import BrokerProxy  # noqa: E402
from trace_receiver import TraceReceiver, check as check_traces, tree  # noqa: E402

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2f"
ITEMS = ("kettle", "teapot", "mug", "whisk", "colander", "ladle", "sieve")
STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", flush=True)


class Failure(Exception):
    """Stops the run: the setup failed, or something did not happen in time."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(method: str, url: str, timeout: float = 15.0) -> dict:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except (OSError, http.client.HTTPException):
        return False


def wait_until(what: str, done: Callable[[], bool], timeout: float,
               progress: Optional[Callable[[], str]] = None) -> None:
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    while not done():
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not after {timeout:.0f} s"
                          + (f" ({progress()})" if progress else ""))
        if progress and time.monotonic() - last > 5:
            say(f"  waiting for {what}: {progress()}")
            last = time.monotonic()
        time.sleep(0.05)


def metrics(port: int) -> Counter:
    """A Prometheus text page's samples, keyed `name{labels}`."""
    samples: Counter = Counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except (OSError, http.client.HTTPException):
        return samples
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                samples[name] += float(value)
            except ValueError:
                pass
    return samples


# --- the idem binary and RabbitMQ ----------------------------------------------------------------

def find_idem(explicit: Optional[str]) -> str:
    if explicit or os.environ.get("IDEM_BIN"):
        path = explicit or os.environ["IDEM_BIN"]
        if not os.access(path, os.X_OK):
            raise Failure(f"{path} is not an executable idem binary")
        # The processes run in a work directory of their own.
        return os.path.abspath(path)
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/idem-target")
    target = os.path.join(ROOT, target)  # a relative CARGO_TARGET_DIR is the workspace's
    path = os.path.join(target, "debug", "idem")
    if not os.access(path, os.X_OK):
        say(f"building idem into {target} (cargo build -p idem-gateway --bin idem) …")
        built = subprocess.run(["cargo", "build", "-q", "-p", "idem-gateway", "--bin", "idem"],
                               cwd=ROOT, env=dict(os.environ, CARGO_TARGET_DIR=target))
        if built.returncode != 0 or not os.access(path, os.X_OK):
            raise Failure("cargo could not build idem")
    return path


class RabbitMq:
    """The broker: its URL, and the queue's declaration and depth through `rabbitmqctl`."""

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "amqp" or not parts.hostname:
            raise Failure(f"{url}: an amqp://USER:PASSWORD@HOST:PORT/VHOST URL is needed")
        self.host, self.port = parts.hostname, parts.port or 5672
        self.vhost = urllib.parse.unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        self.ctl = shutil.which("rabbitmqctl") or next(
            (p for p in ("/usr/sbin/rabbitmqctl", "/usr/lib/rabbitmq/bin/rabbitmqctl")
             if os.access(p, os.X_OK)), None)

    def through(self, port: int) -> str:
        """The URL with the broker's address replaced by 127.0.0.1:PORT (the proxy's)."""
        parts = urllib.parse.urlsplit(self.url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (userinfo + "@" if userinfo else "") + f"127.0.0.1:{port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    def _ctl(self, *arguments: str) -> str:
        if not self.ctl:
            raise Failure("rabbitmqctl is not installed here: declare a durable queue yourself "
                          "and name it with --queue")
        done = subprocess.run([self.ctl, *arguments], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=120)
        if done.returncode != 0:
            raise Failure(f"rabbitmqctl {' '.join(arguments[:1])} failed: {done.stdout.strip()}")
        return done.stdout

    def declare(self, queue: str) -> None:
        """A durable queue, deleted by RabbitMQ after 30 minutes without a consumer should this
        script not get to delete it. (idem deliver only checks that its queue exists, and the
        relay publishes to it through the default exchange, mandatory: it must exist first.)"""
        for value in (self.vhost, queue):
            if '"' in value or "\\" in value:
                raise Failure(f"{value!r}: use a vhost and queue name without quotes")
        output = self._ctl("eval", (
            f'rabbit_amqqueue:declare(rabbit_misc:r(<<"{self.vhost}">>, queue, <<"{queue}">>), '
            f'true, false, [{{<<"x-expires">>, long, 1800000}}], none, <<"order-pipeline">>).'))
        if not output.lstrip().startswith(("{new,", "{existing,")):
            raise Failure(f"rabbitmqctl could not declare the queue {queue}: {output.strip()}")

    def depth(self, queue: str) -> Optional[int]:
        """The queue's messages, ready and unacknowledged; None when rabbitmqctl cannot say."""
        try:
            output = self._ctl("list_queues", "-p", self.vhost, "-q", "--no-table-headers",
                               "name", "messages")
        except (Failure, subprocess.TimeoutExpired):
            return None
        for line in output.splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] == queue:
                return int(fields[1])
        return None

    def delete(self, queue: str) -> None:
        try:
            self._ctl("delete_queue", "-p", self.vhost, queue)
        except (Failure, subprocess.TimeoutExpired) as error:
            say(f"could not delete the queue {queue}: {error}")


# --- the processes -------------------------------------------------------------------------------

class Process:
    """One process of the pipeline, started again after each kill, its output appended to
    logs/NAME.log."""

    def __init__(self, name: str, argv: list[str], env: dict, log_dir: str,
                 ready: Callable[[], bool], admin_port: Optional[int] = None) -> None:
        self.name, self.argv, self.env, self.ready = name, argv, env, ready
        self.admin_port = admin_port
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.process: Optional[subprocess.Popen] = None
        self.starts = 0
        self.totals: Counter = Counter()  # metrics summed over the process's lives

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    def start(self) -> None:
        self.starts += 1
        with open(self.log_path, "a") as log:
            log.write(f"--- start {self.starts}: {' '.join(self.argv)}\n")
            log.flush()
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, cwd=HERE, start_new_session=True)

        def up() -> bool:
            if self.process.poll() is not None:
                raise Failure(f"{self.name} exited with {self.process.returncode} at start: "
                              f"see {self.log_path}")
            return self.ready()

        wait_until(f"{self.name} to start", up, 60)

    def scrape(self) -> None:
        """Adds this life's counters to the totals (before it ends: they die with it)."""
        if self.admin_port and self.process and self.process.poll() is None:
            self.totals.update(metrics(self.admin_port))

    def kill(self) -> None:
        self.scrape()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.scrape()
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, errors="replace") as log:
                return "".join(log.readlines()[-lines:])
        except OSError:
            return ""


def child_env(extra: dict) -> dict:
    """The environment of a child: this one without IDEM_* and OTEL_* settings that would
    change what the pipeline runs, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IDEM_", "OTEL_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


# --- the client ----------------------------------------------------------------------------------

class Order:
    def __init__(self, number: int, drop: Optional[str]) -> None:
        self.id = f"order-{number:04d}"
        self.key = str(uuid.uuid4())
        self.trace_id = os.urandom(16).hex()
        self.body = json.dumps({"order_id": self.id, "item": random.choice(ITEMS),
                                "quantity": random.randint(1, 5)}).encode()
        self.drop = drop  # None, "close" or "timeout": how the first attempt's answer is lost
        self.attempts = 0
        self.statuses: Counter = Counter()
        self.replayed = False
        self.answer: Optional[dict] = None
        self.error: Optional[str] = None


class Client:
    """Places orders through the order gateway, retrying on a timeout, a lost connection, 409
    and 5xx until the answer is final, with the same Idempotency-Key and trace id each time."""

    def __init__(self, port: int, workers: int) -> None:
        self.port = port
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="client")

    def submit(self, orders: list[Order]) -> list[Future]:
        return [self.pool.submit(self.place, order) for order in orders]

    def place(self, order: Order) -> Order:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            order.attempts += 1
            headers = {
                "content-type": "application/json",
                "idempotency-key": order.key,
                "traceparent": f"00-{order.trace_id}-{os.urandom(8).hex()}-01",
            }
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                connection.request("POST", "/orders", body=order.body, headers=headers)
                if order.attempts == 1 and order.drop:
                    answered = self._drop(order, connection)
                    if answered is None:
                        self._back_off(1)
                        continue
                    response, data = answered
                else:
                    response = connection.getresponse()
                    data = response.read()
            except (OSError, http.client.HTTPException) as error:
                order.statuses[type(error).__name__] += 1
                self._back_off(order.attempts)
                continue
            finally:
                connection.close()
            order.statuses[str(response.status)] += 1
            if response.status == 201:
                order.answer = json.loads(data)
                order.replayed = response.getheader("idempotent-replayed") == "true"
                if order.answer.get("order_id") != order.id:
                    order.error = f"answered with another order: {order.answer}"
                if order.drop:
                    say(f"  client: {order.id}: attempt {order.attempts} answered 201"
                        f"{', replayed' if order.replayed else ''}: order #{order.answer['seq']}")
                return order
            if response.status in (408, 409, 429) or response.status >= 500:
                self._back_off(order.attempts, response.getheader("retry-after"))
                continue
            order.error = f"answered {response.status}: {data[:200]!r}"
            return order
        order.error = f"no answer after {order.attempts} attempts: {dict(order.statuses)}"
        return order

    def _drop(self, order: Order, connection: http.client.HTTPConnection):
        """Loses the first attempt's answer: None once it is lost; the response and its body if
        it came before the client could lose it."""
        if order.drop == "close":
            time.sleep(0.01)  # the request is on its way: the gateway has it
            say(f"FAULT client: {order.id}: closed the connection before reading the answer "
                f"to its first attempt")
        else:
            connection.sock.settimeout(0.005)  # shorter than the order takes
            try:
                response = connection.getresponse()
                return response, response.read()
            except socket.timeout:
                say(f"FAULT client: {order.id}: gave up on its first attempt after 5 ms "
                    f"(a timeout): its answer is lost")
        order.statuses[f"dropped ({order.drop})"] += 1
        return None

    @staticmethod
    def _back_off(attempt: int, retry_after: Optional[str] = None) -> None:
        wait = min(1.0, 0.05 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
        if retry_after and retry_after.isdigit():
            wait = max(wait, min(float(retry_after), 1.0))
        time.sleep(wait)


# --- the pipeline --------------------------------------------------------------------------------

class Pipeline:
    def __init__(self, args: argparse.Namespace, idem: str, work: str) -> None:
        self.args = args
        self.idem = idem
        self.work = work
        self.logs = os.path.join(work, "logs")
        os.makedirs(self.logs)
        self.broker = RabbitMq(args.amqp_url)
        self.queue = args.queue or f"idem-order-pipeline-{uuid.uuid4().hex[:8]}"
        self.declared = False
        self.orders_db = os.path.join(work, "orders.db")
        self.shipping_db = os.path.join(work, "shipping.db")
        self.receiver = None if args.no_traces else TraceReceiver(os.path.join(work, "spans.jsonl"))
        self.proxy: Optional[BrokerProxy] = None
        self.processes: dict[str, Process] = {}
        self.faults: list[tuple[str, str]] = []
        self.orders: list[Order] = []
        self.client: Optional[Client] = None

    # set-up

    def start(self) -> None:
        if not self.args.queue:
            self.broker.declare(self.queue)
            self.declared = True
        say(f"RabbitMQ at {self.broker.host}:{self.broker.port}, queue {self.queue}")
        self.proxy = BrokerProxy(self.broker.host, self.broker.port, ["relay", "deliver"])
        ports = {name: free_port() for name in (
            "api", "order-gateway", "order-gateway-admin", "relay-admin", "shipping",
            "shipping-gateway", "shipping-gateway-admin", "deliver-admin")}
        self.ports = ports
        python = sys.executable

        def traced(service: str) -> dict:
            if not self.receiver:
                return child_env({})
            return child_env({
                "OTEL_EXPORTER_OTLP_ENDPOINT": self.receiver.endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
                "OTEL_SERVICE_NAME": service,
            })

        def add(name: str, argv: list[str], env: dict, ready: Callable[[], bool],
                admin: Optional[int] = None) -> None:
            self.processes[name] = Process(name, argv, env, self.logs, ready, admin)

        def healthy(port: int) -> Callable[[], bool]:
            return lambda: answers(f"http://127.0.0.1:{port}/healthz")

        def outbox_ready() -> bool:
            return healthy(ports["relay-admin"])() and table_exists(self.orders_db, "idem_outbox")

        # The relay creates the outbox table (--migrate) that the order API writes to. On
        # SQLite, a killed relay's claim holds its messages for the lease: 3 s here.
        add("relay", [self.idem, "relay", "--store", f"sqlite://{self.orders_db}", "--migrate",
                      "--broker", self.broker.through(self.proxy.port("relay")),
                      "--lease", "3s", "--publish-timeout", "1s", "--poll-interval", "100ms",
                      "--admin-listen", f"127.0.0.1:{ports['relay-admin']}",
                      "--progress-interval", "5s"],
            traced("relay"), outbox_ready, ports["relay-admin"])
        add("order-api", [python, "order_api.py", "--port", str(ports["api"]),
                          "--db", self.orders_db, "--destination", self.queue],
            child_env({}), lambda: answers(f"http://127.0.0.1:{ports['api']}/fault/state"))
        add("order-gateway", [self.idem, "serve", "--listen", f"127.0.0.1:{ports['order-gateway']}",
                              "--admin-listen", f"127.0.0.1:{ports['order-gateway-admin']}",
                              "--upstream", f"http://127.0.0.1:{ports['api']}",
                              "--store", f"sqlite://{self.work}/order-gateway.db",
                              "--in-flight", "wait"],
            traced("order-gateway"), healthy(ports["order-gateway-admin"]),
            ports["order-gateway-admin"])
        add("shipping", [python, "shipping.py", "--port", str(ports["shipping"]),
                         "--db", self.shipping_db],
            child_env({}), lambda: answers(f"http://127.0.0.1:{ports['shipping']}/fault/state"))
        add("shipping-gateway", [self.idem, "serve",
                                 "--listen", f"127.0.0.1:{ports['shipping-gateway']}",
                                 "--admin-listen", f"127.0.0.1:{ports['shipping-gateway-admin']}",
                                 "--upstream", f"http://127.0.0.1:{ports['shipping']}",
                                 "--store", f"sqlite://{self.work}/shipping-gateway.db",
                                 "--in-flight", "wait", "--wait-timeout", "20s"],
            traced("shipping-gateway"), healthy(ports["shipping-gateway-admin"]),
            ports["shipping-gateway-admin"])
        # Orders are independent of one another: --unordered delivers them side by side (the
        # default, one queue one message at a time, suits events that must stay in order).
        add("deliver", [self.idem, "deliver",
                        "--broker", self.broker.through(self.proxy.port("deliver")),
                        "--from", self.queue, "--group", "shipping",
                        "--to", f"http://127.0.0.1:{ports['shipping-gateway']}/shipments",
                        "--unordered", "--concurrency", "8", "--max-in-flight", "32",
                        "--backoff", "100ms", "--max-backoff", "1s",
                        "--admin-listen", f"127.0.0.1:{ports['deliver-admin']}",
                        "--progress-interval", "5s"],
            traced("deliver"), healthy(ports["deliver-admin"]), ports["deliver-admin"])
        for name in ("relay", "order-api", "order-gateway", "shipping", "shipping-gateway",
                     "deliver"):
            self.processes[name].start()
        say("started: " + ", ".join(f"{p.name} (pid {p.pid})" for p in self.processes.values()))
        self.client = Client(ports["order-gateway"], self.args.workers)

    def stop(self) -> None:
        # Front to back, so that nothing is left half-way; SIGTERM lets the idem processes
        # export their last spans.
        for name in ("order-gateway", "order-api", "relay", "deliver", "shipping-gateway",
                     "shipping"):
            if name in self.processes:
                self.processes[name].stop()

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.process and process.process.poll() is None:
                process.process.kill()
                process.process.wait()

    # what the databases and processes say

    def shipped(self) -> Counter:
        return count_by_order(self.shipping_db, "shipments")

    def placed(self) -> Counter:
        return count_by_order(self.orders_db, "orders")

    def outbox(self) -> Counter:
        with sqlite3.connect(self.orders_db, timeout=10) as db:
            return Counter(dict(db.execute(
                "SELECT state, count(*) FROM main.idem_outbox GROUP BY state")))

    def hold(self, service: str) -> dict:
        return http_json("POST", f"http://127.0.0.1:{self.ports[service]}/fault/hold")

    def release(self, service: str) -> None:
        http_json("POST", f"http://127.0.0.1:{self.ports[service]}/fault/release")

    def parked(self, service: str) -> int:
        return http_json("GET", f"http://127.0.0.1:{self.ports[service]}/fault/state")["parked"]

    def wait_parked(self, service: str, wanted: int) -> int:
        """Waits until `wanted` requests wait at the service's hold (5 s at most)."""
        deadline = time.monotonic() + 5
        while self.parked(service) < wanted and time.monotonic() < deadline:
            time.sleep(0.02)
        parked = self.parked(service)
        if parked == 0:
            raise Failure(f"no request reached {service} while it was held")
        return parked

    def fault(self, hop: str, what: str) -> None:
        self.faults.append((hop, what))
        say(f"FAULT {hop}: {what}")

    def spans_exported(self, service: str, name: str, orders: list[Order]) -> None:
        """Before a kill: waits until the receiver holds `service`'s span for each of `orders`,
        whose work at that hop is done, so that the kill cannot take them with it (a process
        exports its spans every 100 ms: a SIGKILL loses at most those)."""
        if not self.receiver or not orders:
            return
        if not any(s["service"] == service for s in self.receiver.snapshot()):
            return  # nothing from it at all: the trace check will say so
        wanted = {order.trace_id for order in orders}
        if not self.receiver.wait_for(
                lambda: wanted <= self.receiver.traces_with(service, name), 5):
            say(f"  note: {len(wanted - self.receiver.traces_with(service, name))} {name} spans "
                f"of {service} had not arrived before its kill")

    # the phases

    def run(self) -> None:
        rounds = self.args.rounds
        faults = [("the order API killed", self.api_killed),
                  ("the relay killed", self.relay_killed),
                  ("the broker's connections cut", self.broker_cut),
                  ("the deliverer killed", self.deliverer_killed),
                  ("the shipping service killed", self.consumer_killed)]
        phases = [("no fault but the client's", self.calm)] + faults * rounds
        sizes = [self.args.orders // len(phases) + (i < self.args.orders % len(phases))
                 for i in range(len(phases))]
        number = 0
        for index, ((title, phase), size) in enumerate(zip(phases, sizes), 1):
            batch = []
            for _ in range(size):
                number += 1
                drop = None
                if number % self.args.drop_every == 0:
                    drop = "close" if (number // self.args.drop_every) % 2 else "timeout"
                batch.append(Order(number, drop))
            self.orders.extend(batch)
            say(f"phase {index}/{len(phases)}: {title}: {len(batch)} orders "
                f"({batch[0].id} to {batch[-1].id})")
            futures = phase(batch)
            for future in futures:
                order = future.result()
                if order.error:
                    raise Failure(f"{order.id}: {order.error}")
            attempts = sum(o.attempts for o in batch)

            def shipped() -> int:
                counts = self.shipped()
                return sum(1 for o in batch if o.id in counts)

            wait_until(f"phase {index}'s orders to be shipped", lambda: shipped() == len(batch),
                       90, lambda: f"{shipped()}/{len(batch)} shipped, "
                                   f"outbox {dict(self.outbox())}")
            say(f"  phase {index}: {len(batch)} orders placed in {attempts} attempts "
                f"(statuses {dict(sum((o.statuses for o in batch), Counter()))}), all shipped")

    def calm(self, batch: list[Order]) -> list[Future]:
        """No fault but the client's: orders flow."""
        return self.client.submit(batch)

    def api_killed(self, batch: list[Order]) -> list[Future]:
        """The order API killed: SIGKILL with requests in flight, before their commits."""
        self.hold("api")
        futures = self.client.submit(batch)
        parked = self.wait_parked("api", len(batch))
        api = self.processes["order-api"]
        self.fault("order API", f"SIGKILL pid {api.pid} with {parked} requests in flight "
                   f"(the gateway answers 502 and releases their keys; the clients retry)")
        api.kill()
        time.sleep(0.5)
        api.start()
        say(f"  order API restarted (pid {api.pid})")
        return futures

    def relay_killed(self, batch: list[Order]) -> list[Future]:
        """The relay killed: SIGKILL between publishing and the broker's confirmations."""
        # Messages the relay has published and marked: their spans must be out before it dies.
        done = [o for o in self.orders if o not in batch]
        self.proxy.stall("relay")
        before = self.proxy.sent("relay")
        futures = self.client.submit(batch)
        wait_until("the relay to publish", lambda: self.proxy.sent("relay") - before >= 200, 20)
        time.sleep(0.3)
        self.spans_exported("relay", "idem.publish", done)
        relay = self.processes["relay"]
        self.fault("relay", f"SIGKILL pid {relay.pid} after it published "
                   f"{self.proxy.sent('relay') - before} bytes whose confirmations it never got "
                   f"(its claim holds them for the 3 s lease; then they are published again)")
        relay.kill()
        self.proxy.unstall("relay")
        relay.start()
        say(f"  relay restarted (pid {relay.pid})")
        return futures

    def broker_cut(self, batch: list[Order]) -> list[Future]:
        """The broker's connections cut: 3 s without RabbitMQ, deliveries in flight."""
        first, second = batch[: (len(batch) + 1) // 2], batch[(len(batch) + 1) // 2:]
        self.hold("shipping")
        futures = self.client.submit(first)
        parked = self.wait_parked("shipping", min(len(first), 8))
        closed = self.proxy.cut()
        self.fault("broker connection", f"cut {closed} connections (the relay's and the "
                   f"deliverer's) with {parked} deliveries in flight; refused for 3 s")
        futures += self.client.submit(second)  # their messages wait in the outbox
        time.sleep(0.5)
        # The answers to the deliveries in flight reach idem deliver, whose channel is gone: it
        # cannot acknowledge them, and RabbitMQ gives the messages out again.
        self.release("shipping")
        time.sleep(2.5)
        self.proxy.restore()
        say("  broker reachable again")
        return futures

    def deliverer_killed(self, batch: list[Order]) -> list[Future]:
        """The deliverer killed: SIGKILL with deliveries in flight."""
        self.hold("shipping")
        done = list(self.orders_shipped())
        futures = self.client.submit(batch)
        parked = self.wait_parked("shipping", min(len(batch), 8))
        self.spans_exported("deliver", "idem.deliver", done)
        deliver = self.processes["deliver"]
        self.fault("deliverer", f"SIGKILL pid {deliver.pid} with {parked} deliveries in flight "
                   f"(RabbitMQ gives the unacknowledged messages to its successor)")
        deliver.kill()
        deliver.start()
        say(f"  deliverer restarted (pid {deliver.pid}); its copies wait on the first "
            f"executions at the shipping gateway")
        time.sleep(1.0)
        self.release("shipping")
        return futures

    def consumer_killed(self, batch: list[Order]) -> list[Future]:
        """The shipping service killed: SIGKILL with requests in flight, before their commits."""
        self.hold("shipping")
        futures = self.client.submit(batch)
        parked = self.wait_parked("shipping", min(len(batch), 8))
        shipping = self.processes["shipping"]
        self.fault("consumer", f"SIGKILL shipping.py pid {shipping.pid} with {parked} requests "
                   f"in flight (the gateway answers 502 and releases their keys; idem deliver "
                   f"tries again)")
        shipping.kill()
        time.sleep(0.5)
        shipping.start()
        say(f"  shipping service restarted (pid {shipping.pid})")
        return futures

    def orders_shipped(self) -> list[Order]:
        shipped = self.shipped()
        return [o for o in self.orders if o.id in shipped]

    def drain(self) -> None:
        """Waits for the pipeline to be empty: the outbox, the queue and the deliverer."""
        deliver = self.processes["deliver"]

        def empty() -> bool:
            if sum(self.outbox().values()) or len(self.orders_shipped()) < len(self.orders):
                return False
            if metrics(deliver.admin_port).get("idem_deliver_in_flight", 0):
                return False
            return self.broker.depth(self.queue) in (0, None)

        wait_until("the outbox, the queue and the deliverer to be empty", empty, 120,
                   lambda: f"outbox {dict(self.outbox())}, "
                           f"shipped {len(self.orders_shipped())}/{len(self.orders)}")
        time.sleep(0.5)  # the last answers' bookkeeping, and the last spans' batch


def table_exists(path: str, table: str) -> bool:
    if not os.path.exists(path):
        return False
    with sqlite3.connect(path, timeout=10) as db:
        return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                          (table,)).fetchone() is not None


def count_by_order(path: str, table: str) -> Counter:
    if not table_exists(path, table):
        return Counter()
    with sqlite3.connect(path, timeout=10) as db:
        return Counter(dict(db.execute(
            f"SELECT order_id, count(*) FROM {table} GROUP BY order_id")))


def markdown(header: tuple, rows: list[tuple]) -> str:
    widths = [max(len(str(v)) for v in column) for column in zip(header, *rows)]

    def line(values: tuple) -> str:
        return "| " + " | ".join(f"{str(v):<{w}}" for v, w in zip(values, widths)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *map(line, rows)])


def outcomes(samples: Counter, metric: str, label: str) -> Counter:
    """`metric{label="X",…}` samples by X."""
    found: Counter = Counter()
    for name, value in samples.items():
        if name.startswith(metric + "{") and f'{label}="' in name:
            found[name.split(f'{label}="', 1)[1].split('"', 1)[0]] += int(value)
    return found


FAULTS = {
    "client": "an answer lost: the connection closed before reading it, or a 5 ms timeout",
    "order API": "SIGKILL with requests in flight, restarted",
    "relay": "SIGKILL between its publishes and their confirmations, restarted",
    "broker connection": "every connection to RabbitMQ cut, refused for 3 s",
    "deliverer": "SIGKILL of idem deliver with deliveries in flight, restarted",
    "consumer": "SIGKILL of shipping.py with requests in flight, restarted",
}


def report(pipeline: Pipeline, seconds: float) -> list[str]:
    """Prints the tables; returns the failures."""
    failures: list[str] = []
    orders = pipeline.orders
    ids = {o.id for o in orders}
    placed, shipped = pipeline.placed(), pipeline.shipped()
    outbox = pipeline.outbox()
    with sqlite3.connect(pipeline.shipping_db) as db:
        consumer_requests = db.execute("SELECT count(*) FROM requests").fetchone()[0]
    p = pipeline.processes
    gateway1 = outcomes(p["order-gateway"].totals, "idem_requests_total", "outcome")
    gateway2 = outcomes(p["shipping-gateway"].totals, "idem_requests_total", "outcome")
    published = int(sum(v for k, v in p["relay"].totals.items()
                        if k.startswith("idem_outbox_published_total")))
    delivered = outcomes(p["deliver"].totals, "idem_deliver_attempts_total", "answer")
    copies = gateway2["replayed"] + gateway2["conflict"]

    checks: list[tuple] = []  # what, expected, seen, passed

    def exactly_once(what: str, counts: Counter) -> None:
        good = sum(1 for i in ids if counts[i] == 1)
        missing = sum(1 for i in ids if counts[i] == 0)
        doubled = sum(1 for i in ids if counts[i] > 1)
        unknown = sum(n for i, n in counts.items() if i not in ids)
        checks.append((what, len(orders), good, good == len(orders) and not unknown))
        if good != len(orders) or unknown:
            failures.append(f"{what}: {missing} missing, {doubled} more than once, {unknown} "
                            f"rows for orders never placed")

    answered = sum(1 for o in orders if o.answer and not o.error)
    checks.append(("orders answered 201 with their own order", len(orders), answered,
                   answered == len(orders)))
    exactly_once("orders in the order API's database exactly once", placed)
    exactly_once("orders shipped exactly once (shipments by order id)", shipped)
    left = sum(outbox.values())
    checks.append(("outbox rows left (pending or dead)", 0, left, left == 0))
    checks.append(("copies absorbed by the shipping gateway (replayed, or 409)", "≥ 1", copies,
                   copies >= 1))
    for what, expected, seen, passed in checks:
        if not passed and not what.startswith(("orders in", "orders shipped")):
            failures.append(f"{what}: {seen}, expected {expected}")

    trace_rows: list[tuple] = []
    figures: dict = {}
    spans: list[dict] = []
    if pipeline.receiver:
        spans = pipeline.receiver.snapshot()
        trace_rows, trace_failures, figures = check_traces(
            spans, {o.id: o.trace_id for o in orders})
        failures += trace_failures
        unreadable = pipeline.receiver.unreadable
        if unreadable:
            failures.append(f"the OTLP receiver could not read {sum(unreadable.values())} "
                            f"posts: {dict(unreadable)}")
        if not spans:
            failures.append("no span reached the OTLP receiver: does this idem export traces "
                            "(--otlp-endpoint)? --no-traces runs without the trace check")

    lost_answers = sum(1 for o in orders if o.statuses.get(f"dropped ({o.drop})"))
    faults = Counter(hop for hop, _ in pipeline.faults)
    print()
    print(f"{len(orders)} orders in {seconds:.1f} s; the faults:")
    print(markdown(("hop", "fault", "times"), [("client", FAULTS["client"], lost_answers)] + [
        (hop, FAULTS[hop], faults[hop]) for hop in FAULTS if hop != "client"]))
    print()
    print(markdown(("along the way", "count"), [
        ("client attempts, retries included", sum(o.attempts for o in orders)),
        ("client answers that were replays (Idempotent-Replayed: true)",
         sum(1 for o in orders if o.replayed)),
        ("order-gateway requests, by outcome", fmt(gateway1)),
        ("orders written by the order API", sum(placed.values())),
        ("messages published by the relays (confirmed by the broker)", published or "?"),
        ("deliveries tried by idem deliver, by answer", fmt(delivered)),
        ("shipping-gateway requests, by outcome", fmt(gateway2)),
        ("requests that reached shipping.py", consumer_requests),
        ("shipments written by shipping.py", sum(shipped.values())),
    ]))
    print()
    rows = [(what, expected, seen, "ok" if passed else "FAIL")
            for what, expected, seen, passed in checks]
    rows += [(what, expected, seen, "ok" if seen == expected else "FAIL")
             for what, expected, seen in trace_rows]
    print(markdown(("check", "expected", "seen", ""), rows))
    if figures:
        print(f"\ntraces: {figures['order_traces']} orders' traces among {figures['traces']}, "
              f"{figures['spans']} spans ("
              + ", ".join(f"{service} {n}" for service, n in sorted(figures["by_service"].items()))
              + ")")
        if figures["stray"]:
            print("spans outside the orders' traces: " + ", ".join(
                f"{n} {name} ({service})"
                for (service, name), n in sorted(figures["stray"].items())))
        # The trace with the most spans past the order gateway: its message's copies.
        downstream = Counter(s["trace_id"] for s in spans if s["service"] != "order-gateway")
        sample = max(orders, key=lambda o: downstream[o.trace_id])
        if downstream[sample.trace_id]:
            print(f"\n{sample.id}'s trace ({sample.trace_id}), the one with the most spans past "
                  f"the order gateway:")
            for line in tree(spans, sample.trace_id):
                print("  " + line)
    elif pipeline.receiver is None:
        print("\ntraces: not checked (--no-traces)")
    return failures


def fmt(counter: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items()) if v) or "0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true",
                        help="20 orders, each fault once (CI's form); default: 200 orders, "
                             "three rounds of faults")
    parser.add_argument("--orders", type=int, help="how many orders (default 20 short, 200 full)")
    parser.add_argument("--rounds", type=int, help="rounds of the five faults (1 short, 3 full)")
    parser.add_argument("--drop-every", type=int, default=5,
                        help="every Nth order loses its first answer on the client's side")
    parser.add_argument("--workers", type=int, default=16, help="client threads")
    parser.add_argument("--no-traces", action="store_true",
                        help="no OTLP receiver, no trace check: exactly-once only")
    parser.add_argument("--idem", help="the idem binary (default: $IDEM_BIN, else "
                                       "$CARGO_TARGET_DIR/debug/idem, built if missing)")
    parser.add_argument("--amqp-url", default=os.environ.get("IDEM_EXAMPLE_AMQP_URL",
                                                             DEFAULT_AMQP_URL))
    parser.add_argument("--queue", help="an existing queue to use (default: one declared with "
                                        "rabbitmqctl for this run, deleted at its end)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--seed", type=int, help="the random choices' seed")
    parser.add_argument("--timeout", type=float, help="give up after this many seconds "
                                                      "(default 300 short, 1200 full)")
    args = parser.parse_args()
    args.orders = args.orders or (20 if args.short else 200)
    args.rounds = args.rounds or (1 if args.short else 3)
    if args.orders < 1 + 5 * args.rounds:
        parser.error(f"--orders: at least {1 + 5 * args.rounds} for {args.rounds} rounds")
    random.seed(args.seed)

    def timed_out(*_: object) -> None:
        raise Failure(f"the run took longer than {args.timeout:.0f} s")

    args.timeout = args.timeout or (300 if args.short else 1200)
    signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(int(args.timeout))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    work = tempfile.mkdtemp(prefix="idem-order-pipeline-")
    pipeline = None
    failures: list[str] = ["the run did not finish"]
    try:
        idem = find_idem(args.idem)
        say(f"{args.orders} orders, {args.rounds} round{'s' * (args.rounds > 1)} of faults; "
            f"idem {idem}; work directory {work}")
        if not args.no_traces:
            help_text = subprocess.run([idem, "serve", "--help"], stdout=subprocess.PIPE,
                                       text=True).stdout
            if "--otlp-endpoint" not in help_text:
                say("note: this idem has no --otlp-endpoint: it exports no traces, and the trace "
                    "check will fail (--no-traces skips it)")
        pipeline = Pipeline(args, idem, work)
        pipeline.start()
        pipeline.run()
        say("every order answered and shipped; waiting for the pipeline to drain …")
        pipeline.drain()
        pipeline.stop()
        failures = report(pipeline, time.monotonic() - STARTED)
    except Failure as error:
        failures = [str(error)]
    except KeyboardInterrupt:
        failures = ["interrupted"]
    finally:
        signal.alarm(0)
        if pipeline:
            pipeline.kill_all()
            if pipeline.proxy:
                pipeline.proxy.close()
            if pipeline.receiver:
                pipeline.receiver.close()
            if pipeline.client:
                pipeline.client.pool.shutdown(wait=False, cancel_futures=True)
            if pipeline.declared:
                pipeline.broker.delete(pipeline.queue)
    if failures:
        print()
        for failure in failures:
            print(f"FAILED: {failure}", file=sys.stderr)
        if pipeline:
            for process in pipeline.processes.values():
                print(f"--- the end of {process.log_path}:\n{process.tail()}", file=sys.stderr)
        print(f"the work directory is kept: {work}", file=sys.stderr)
        return 1
    print(f"\nPASSED: every order placed once and shipped once "
          f"({time.monotonic() - STARTED:.1f} s)")
    if args.keep:
        print(f"the work directory is kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
