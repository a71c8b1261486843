"""The admin dashboards in a real browser: headless Chromium driven by Selenium.

Starts `idem serve` (memory store, an admin token) in front of an upstream of its own, opens
the dashboard, enters the token, sends known traffic (10 executions, 5 replays, 3 conflicts,
2 mismatches) and checks that the page shows exactly those counts, the latency of the slow
request with and without the upstream, a looked-up key, a key held for more than 10 s among
the keys it lists, a streamed response in progress and then done, and a key forgotten (after
its confirmation; the held key after a second one). Then `idem relay` (an SQLite outbox, no admin
token) and its page. The browser's console must hold no error but the API's expected 401, 404
and 409 answers: a script error or a Content-Security-Policy violation fails the run.

Screenshots go to the artifact directory; with IDEM_BLESS=1 the gateway's also to
docs/dashboard.png, which the README shows. Any mismatch exits non-zero.

    python dashboard.py --idem PATH/TO/idem --artifacts DIR [--chromium PATH] [--chromedriver PATH]
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

TOKEN = "dashboard-browser-test-token"
ANONYMOUS = "0" * 64
REPO = Path(__file__).resolve().parents[2]
# The console lines a browser writes for the API's expected answers: the 401 that asks for the
# token, the 404 of a forgotten key, the 409 of a held one.
EXPECTED_CONSOLE = re.compile(
    r"^\S+/(metrics|readyz|v1/\S+) - Failed to load resource: the server responded with a "
    r"status of 401 |^\S+/v1/keys/\S+ - Failed to load resource: the server responded with a "
    r"status of (404|409) "
)


class Failure(Exception):
    """What the page showed is not what it should have."""


# --- the upstream -----------------------------------------------------------------------------


class Upstream(BaseHTTPRequestHandler):
    """POST answers 201 with a JSON body; `/slow` first waits `?seconds=` (1.5 by default);
    `/stream` answers events for `?seconds=` (3)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        url = urlparse(self.path)
        if url.path == "/stream":
            return self.stream(float(parse_qs(url.query).get("seconds", ["3"])[0]))
        if url.path == "/slow":
            time.sleep(float(parse_qs(url.query).get("seconds", ["1.5"])[0]))
        body = json.dumps({"path": url.path, "key": self.headers.get("idempotency-key")}).encode()
        self.send_response(201)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream(self, seconds):
        """Server-sent events of unknown length (chunked), one every 0.25 s for `seconds`."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for n in range(int(seconds / 0.25)):
            event = f"data: {n}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            time.sleep(0.25)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


def start_upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


# --- idem -------------------------------------------------------------------------------------


def idem_environment():
    """This environment without IDEM_* variables: the flags alone configure the processes."""
    return {name: value for name, value in os.environ.items() if not name.startswith("IDEM_")}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gateway(idem, upstream, token_file):
    """`idem serve` on ports the system picks; returns the process and its two base URLs."""
    process = subprocess.Popen(
        [idem, "serve", "--upstream", upstream, "--store", "memory://",
         "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
         "--admin-token-file", token_file, "--log-format", "json"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=sys.stderr, text=True,
        env=idem_environment(),
    )
    deadline = time.monotonic() + 30
    for line in process.stdout:
        entry = json.loads(line)
        if entry.get("message") == "listening":
            # Keep reading, so that the gateway never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
            return process, f"http://{entry['listen']}", f"http://{entry['admin']}"
        if time.monotonic() > deadline:
            break
    raise Failure("the gateway did not say where it listens")


def start_relay(idem, database):
    """`idem relay` on an SQLite outbox, without an admin token, its broker out of reach."""
    admin = f"127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [idem, "relay", "--store", f"sqlite://{database}", "--migrate",
         "--broker", "nats://127.0.0.1:9", "--admin-listen", admin, "--log-level", "off"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sys.stderr,
        env=idem_environment(),
    )
    for _ in range(150):
        try:
            http("GET", f"http://{admin}/healthz")
            return process, f"http://{admin}"
        except OSError:
            time.sleep(0.2)
    raise Failure("the relay's admin listener did not start")


def http(method, url, key=None, body=None, token=None):
    """One request; returns (status, headers, body), whatever the status."""
    headers = {"content-type": "application/json"}
    if key:
        headers["idempotency-key"] = key
    if token:
        headers["authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def expect(what, status, wanted, headers=None, replayed=False):
    if status != wanted:
        raise Failure(f"{what}: status {status}, not {wanted}")
    if headers is not None and (headers.get("idempotent-replayed") == "true") != replayed:
        raise Failure(f"{what}: Idempotent-Replayed is {headers.get('idempotent-replayed')!r}")


def send_traffic(proxy, admin):
    """Exactly 10 executions, 5 replays, 3 conflicts and 2 mismatches; the slow one last."""
    for n in range(1, 10):
        status, headers, _ = http("POST", f"{proxy}/orders", f"order-{n}", {"amount": n})
        expect(f"order-{n}", status, 201, headers)
    for n in range(1, 6):
        status, headers, _ = http("POST", f"{proxy}/orders", f"order-{n}", {"amount": n})
        expect(f"the retry of order-{n}", status, 201, headers, replayed=True)
    for n in (6, 7):
        status, _, _ = http("POST", f"{proxy}/orders", f"order-{n}", {"amount": 1000 + n})
        expect(f"order-{n} with another body", status, 422)
    # Three duplicates while the first request of `slow-1` runs: 409 each.
    first = {}
    running = threading.Thread(
        target=lambda: first.update(
            zip(("status", "headers", "body"), http("POST", f"{proxy}/slow", "slow-1", {"n": 1}))
        )
    )
    running.start()
    wait_until("slow-1 is processing", lambda: record_state(admin, "slow-1") == "processing")
    for n in range(3):
        status, _, _ = http("POST", f"{proxy}/slow", "slow-1", {"n": 1})
        expect(f"duplicate {n + 1} of slow-1", status, 409)
    running.join()
    expect("slow-1", first["status"], 201, first["headers"])


def record_state(admin, key):
    status, _, body = http("GET", f"{admin}/v1/keys/{key}", token=TOKEN)
    return json.loads(body)["state"] if status == 200 else status


# --- the page ---------------------------------------------------------------------------------


def wait_until(what, check, timeout=20):
    """Polls `check` until it returns a truthy value; fails with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise Failure(f"timed out waiting until {what} (last: {last!r})")


def texts(driver, ids):
    """The text of each element, read at one instant."""
    return driver.execute_script(
        "return Object.fromEntries(arguments[0].map((id) => "
        "[id, document.getElementById(id) ? document.getElementById(id).textContent : null]));",
        ids,
    )


def shows(driver, expected):
    """Whether every element shows exactly its expected text; else False (wait_until retries)."""
    return texts(driver, list(expected)) == expected


def assert_shows(driver, what, expected, timeout=20):
    try:
        wait_until(what, lambda: shows(driver, expected), timeout)
    except Failure:
        actual = texts(driver, list(expected))
        wrong = {k: (actual[k], v) for k, v in expected.items() if actual[k] != v}
        raise Failure(f"{what}: shown vs expected {wrong}") from None


def visible(driver, element_id):
    return driver.find_element(By.ID, element_id).is_displayed()


def click(driver, element_id):
    driver.find_element(By.ID, element_id).click()


def type_into(driver, element_id, text):
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(text)


def look_up(driver, key, expected_status_prefix):
    type_into(driver, "lookup-key", key)
    click(driver, "lookup-submit")
    wait_until(
        f"the lookup of {key} says {expected_status_prefix!r}",
        lambda: texts(driver, ["lookup-status"])["lookup-status"].startswith(expected_status_prefix),
    )


def confirm(driver, text_part, button, then_closes=True):
    """Answers the confirmation that says `text_part` with `button`."""
    wait_until(
        f"a confirmation says {text_part!r}",
        lambda: visible(driver, "confirm")
        and text_part in texts(driver, ["confirm-text"])["confirm-text"],
    )
    click(driver, button)
    if then_closes:
        wait_until("the confirmation closes", lambda: not visible(driver, "confirm"))


def screenshot(driver, path):
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, height)
    time.sleep(0.5)  # for the chart to be drawn again at the new size
    driver.save_screenshot(str(path))


def console_errors(driver):
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE" and not EXPECTED_CONSOLE.search(entry["message"])
    ]


def browser(chromium, chromedriver):
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,1600", "--force-device-scale-factor=1",
                     "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)


# --- the checks -------------------------------------------------------------------------------


COUNTS = {
    "total-executed": "10",
    "total-replayed": "5",
    "total-conflict": "3",
    "total-mismatch": "2",
    "total-rejected": "0",
    "total-invalid": "0",
    "total-too_large": "0",
    "total-store_error": "0",
    "total-overloaded": "0",
    "total-outcome_unknown": "0",
    "total-passthrough": "0",
    "total-store_full": "0",
}


def check_gateway(driver, idem, artifacts, work):
    token_file = work / "admin-token"
    token_file.write_text(TOKEN + "\n")
    server, upstream = start_upstream()
    gateway, proxy, admin = start_gateway(idem, upstream, str(token_file))
    try:
        # The page itself needs no token; the API does, so the page asks for it.
        status, headers, _ = http("GET", f"{admin}/")
        expect("GET / without the token", status, 200)
        driver.get(f"{admin}/")
        wait_until("the page asks for the token", lambda: visible(driver, "auth"))
        assert_shows(driver, "the page before the token", {"connection": "needs the admin token"})
        type_into(driver, "token", "not-the-token")
        click(driver, "token-save")
        wait_until("a wrong token is refused", lambda: visible(driver, "auth"))
        assert_shows(driver, "a refused token", {"auth-message": "The admin API refused this token."})
        type_into(driver, "token", TOKEN)
        click(driver, "token-save")
        assert_shows(driver, "the page before any traffic", {
            "connection": "live", "total-executed": "0", "total-conflict": "0",
            "store-health": "ready",
        })
        if visible(driver, "auth"):
            raise Failure("the token field is still shown")

        send_traffic(proxy, admin)
        assert_shows(driver, "the counts", COUNTS)
        # The window holds every request: the slow one took 1.5 s, but not in idem itself.
        latency = texts(driver, ["latency-request-p99", "latency-own-p99", "latency-upstream-p99",
                                 "latency-request-p50", "rate-executed", "rate-conflict"])
        for cell in ("latency-request-p99", "latency-upstream-p99"):
            if not re.fullmatch(r"[12]\.\d\d s", latency[cell]):
                raise Failure(f"{cell} shows {latency[cell]!r}, not the slow request's 1 to 2.5 s")
        if not re.fullmatch(r"[\d.]+ ms", latency["latency-own-p99"]):
            raise Failure(f"latency-own-p99 shows {latency['latency-own-p99']!r}, not milliseconds")
        for cell in ("latency-request-p50", "rate-executed", "rate-conflict"):
            if not re.fullmatch(r"[\d.]+( ms)?", latency[cell]) or latency[cell] in ("0", "0.00 ms"):
                raise Failure(f"{cell} shows {latency[cell]!r}")

        # A streamed response is shown in progress while it streams, and gone once recorded.
        streamed = threading.Thread(
            target=http, args=("POST", f"{proxy}/stream?seconds=4", "stream-1", {"n": 1})
        )
        streamed.start()
        assert_shows(driver, "a stream in progress", {
            "streams-in_progress": "1", "streams-joiners": "0",
        })
        streamed.join()
        assert_shows(driver, "no stream in progress", {"streams-in_progress": "0"})

        # A request that holds its key for longer than the page's 10 s.
        held = threading.Thread(
            target=http, args=("POST", f"{proxy}/slow?seconds=16", "held-1", {"n": 1})
        )
        held.start()

        # A key looked up: its record, as the API shows it.
        look_up(driver, "order-1", "Found.")
        assert_shows(driver, "order-1's record", {
            "record-state": "completed", "record-status": "201", "record-scope": ANONYMOUS,
        })
        screenshot(driver, artifacts / "dashboard.png")

        # Forgetting asks first; cancelled, the key stays.
        click(driver, "forget")
        confirm(driver, "order-1", "confirm-cancel")
        if record_state(admin, "order-1") != "completed":
            raise Failure("a cancelled forget removed the key")
        click(driver, "forget")
        confirm(driver, "order-1", "confirm-ok")
        wait_until(
            "the page says the key is forgotten",
            lambda: texts(driver, ["lookup-status"])["lookup-status"].startswith("Forgotten"),
        )
        if visible(driver, "record"):
            raise Failure("the forgotten record is still shown")
        look_up(driver, "order-1", "Not found")
        if record_state(admin, "order-1") != 404:
            raise Failure("the API still has order-1")

        # The held key is listed once held for 10 s; refused with 409 first, it is forgotten
        # after a second confirmation.
        held_sha256 = hashlib.sha256(b"held-1").hexdigest()
        wait_until(
            "the page lists held-1 among the keys held for more than 10 s",
            lambda: driver.execute_script(
                "return [...document.querySelectorAll('#stuck-keys td.hash')]"
                ".map((cell) => cell.title);"
            )[:1] == [held_sha256],
        )
        driver.save_screenshot(str(artifacts / "dashboard-held-key.png"))
        look_up(driver, "held-1", "Found.")
        assert_shows(driver, "held-1's record", {"record-state": "processing", "record-status": "–"})
        click(driver, "forget")
        confirm(driver, "held-1", "confirm-ok", then_closes=False)
        confirm(driver, "A request holds this key", "confirm-ok")
        wait_until(
            "the page says the held key is forgotten",
            lambda: texts(driver, ["lookup-status"])["lookup-status"].startswith("Forgotten"),
        )
        if record_state(admin, "held-1") != 404:
            raise Failure("the API still has held-1")
        held.join()

        errors = console_errors(driver)
        if errors:
            raise Failure(f"the browser's console holds errors: {errors}")
    finally:
        driver.get("about:blank")  # before the page polls a gateway that is gone
        gateway.terminate()
        gateway.wait(timeout=20)
        server.shutdown()


def outbox_counts(admin):
    """The relay's `/v1/outbox`, or None while it answers otherwise (503 before it reached its
    database)."""
    status, _, body = http("GET", f"{admin}/v1/outbox")
    return json.loads(body) if status == 200 else None


def enqueue(database, pending, dead):
    """Messages written into the outbox table as a service's transaction and the relay leave
    them: `pending` waiting, `dead` out of retries."""
    now = int(time.time() * 1000)
    with sqlite3.connect(database) as connection:
        for n in range(pending + dead):
            state = "pending" if n < pending else "dead"
            connection.execute(
                "INSERT INTO idem_outbox (id, destination, headers, payload, state, available_at,"
                " enqueued_at, dead_at) VALUES (?, 'orders', '[]', x'7b7d', ?, ?, ?, ?)",
                (f"message-{n}", state, now, now, None if state == "pending" else now),
            )
    connection.close()


def check_relay(driver, idem, artifacts, work):
    database = work / "outbox.db"
    relay, admin = start_relay(idem, database)
    try:
        wait_until("the relay's /v1/outbox answers 200", lambda: outbox_counts(admin))
        # The broker is out of reach: the pending messages stay due or in flight.
        enqueue(database, pending=3, dead=2)
        wait_until("the relay counts the messages", lambda: outbox_counts(admin)["dead_letters"] == 2)
        driver.get(f"{admin}/")
        # No token on this listener: the page never asks for one.
        assert_shows(driver, "the relay page", {
            "connection": "live", "outbox-dead_letters": "2", "total-published": "0",
        })
        if visible(driver, "auth"):
            raise Failure("the relay page asks for a token its listener does not have")
        shown = texts(driver, ["outbox-due", "outbox-in_flight"])
        if int(shown["outbox-due"]) + int(shown["outbox-in_flight"]) != 3:
            raise Failure(f"the relay page shows {shown}, not 3 messages due or in flight")
        wait_until("a publish rate is shown", lambda: texts(driver, ["rate-published"])["rate-published"] == "0")
        screenshot(driver, artifacts / "relay-dashboard.png")
        errors = console_errors(driver)
        if errors:
            raise Failure(f"the browser's console holds errors: {errors}")
    finally:
        driver.get("about:blank")
        relay.terminate()
        relay.wait(timeout=20)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idem", required=True, help="the idem binary")
    parser.add_argument("--artifacts", required=True, type=Path, help="where screenshots go")
    parser.add_argument("--chromium", default=shutil.which("chromium"))
    parser.add_argument("--chromedriver", default=shutil.which("chromedriver"))
    args = parser.parse_args()
    args.artifacts.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    driver = browser(args.chromium, args.chromedriver)
    try:
        with tempfile.TemporaryDirectory() as work:
            for check in (check_gateway, check_relay):
                try:
                    check(driver, args.idem, args.artifacts, Path(work))
                except Exception:
                    driver.save_screenshot(str(args.artifacts / f"{check.__name__}-failed.png"))
                    raise
    finally:
        driver.quit()
    if os.environ.get("IDEM_BLESS") == "1":
        shutil.copyfile(args.artifacts / "dashboard.png", REPO / "docs" / "dashboard.png")
    print(f"dashboard browser test: passed in {time.monotonic() - started:.1f} s; "
          f"screenshots in {args.artifacts}")


if __name__ == "__main__":
    try:
        main()
    except Failure as failure:
        sys.exit(f"dashboard browser test: FAILED: {failure}")
