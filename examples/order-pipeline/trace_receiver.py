"""An OTLP/HTTP receiver of traces in JSON (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`), and the
check that each order made one trace through every hop.

`POST /v1/traces` takes an ExportTraceServiceRequest: `resourceSpans[]`, each with
`resource.attributes` (`service.name`) and `scopeSpans[].spans[]` (`traceId` and `spanId` in hex,
`parentSpanId`, `name`, `attributes`, `links`), and answers 200 `{}`. A body it cannot read
(protobuf, say) is answered 400 and counted.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

# What each service does for an order, one span at least: the check's contract.
REQUIRED = (
    ("order-gateway", "idem.execute"),
    ("relay", "idem.publish"),
    ("deliver", "idem.deliver"),
    ("shipping-gateway", "idem.execute"),
)
# The hops that must continue the trace they were handed: a span of these outside every
# order's trace means a hop started a trace of its own.
CONTINUED = {name for _, name in REQUIRED}
HEX = re.compile(r"^[0-9a-f]+$")


def _id(value: object, length: int) -> str:
    """An id as lower-case hex: OTLP/JSON writes hex; base64 (protobuf's JSON mapping) too."""
    if not isinstance(value, str) or not value:
        return ""
    if len(value) == length and HEX.match(value.lower()):
        return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        return value
    return raw.hex() if len(raw) * 2 == length else value


def _value(value: dict) -> object:
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_value(v) for v in value["arrayValue"].get("values", [])]
    return None


def _attributes(items: Optional[list]) -> dict:
    return {item.get("key"): _value(item.get("value") or {}) for item in items or []}


def parse(body: dict) -> list[dict]:
    """The spans of an ExportTraceServiceRequest, flattened."""
    spans = []
    for resource_spans in body.get("resourceSpans") or body.get("resource_spans") or []:
        resource = _attributes((resource_spans.get("resource") or {}).get("attributes"))
        service = resource.get("service.name") or "?"
        scopes = resource_spans.get("scopeSpans") or resource_spans.get("scope_spans") or []
        for scope in scopes:
            for span in scope.get("spans") or []:
                spans.append({
                    "service": service,
                    "name": span.get("name", ""),
                    "trace_id": _id(span.get("traceId") or span.get("trace_id"), 32),
                    "span_id": _id(span.get("spanId") or span.get("span_id"), 16),
                    "parent": _id(span.get("parentSpanId") or span.get("parent_span_id"), 16),
                    "start": int(span.get("startTimeUnixNano") or 0),
                    "end": int(span.get("endTimeUnixNano") or 0),
                    "attributes": _attributes(span.get("attributes")),
                    "links": [_id(link.get("traceId"), 32) for link in span.get("links") or []],
                })
    return spans


class TraceReceiver:
    def __init__(self, log_path: Optional[str] = None) -> None:
        self.lock = threading.Lock()
        self.spans: list[dict] = []
        self.unreadable: Counter[str] = Counter()
        self.posts = 0
        self.log = open(log_path, "a") if log_path else None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                status, answer = 200, b"{}"
                try:
                    if self.path.rstrip("/") != "/v1/traces":
                        raise ValueError(f"path {self.path}")
                    if self.headers.get("content-encoding", "").lower() == "gzip":
                        body = gzip.decompress(body)
                    spans = parse(json.loads(body))
                except (ValueError, OSError, AttributeError, TypeError) as error:
                    kind = self.headers.get("content-type") or "no content-type"
                    with receiver.lock:
                        receiver.unreadable[f"{kind}: {str(error)[:80]}"] += 1
                    status, answer = 400, b'{"error":"an OTLP/JSON ExportTraceServiceRequest"}'
                else:
                    receiver.add(spans)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, spans: list[dict]) -> None:
        with self.lock:
            self.posts += 1
            self.spans.extend(spans)
            if self.log:
                for span in spans:
                    self.log.write(json.dumps(span) + "\n")
                self.log.flush()

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.spans)

    def traces_with(self, service: str, name: str) -> set[str]:
        return {s["trace_id"] for s in self.snapshot()
                if s["service"] == service and s["name"] == name}

    def wait_for(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.log:
            self.log.close()


def check(spans: list[dict], orders: dict[str, str]) -> tuple[list[tuple], list[str], dict]:
    """Checks `spans` against `orders` (order id → its trace id): every order's trace holds a
    span of each required hop, no two orders share a trace, and no hop started a trace of its
    own. Returns the table's rows, the failures and the figures."""
    failures: list[str] = []
    by_trace: dict[str, list[dict]] = defaultdict(list)
    for span in spans:
        by_trace[span["trace_id"]].append(span)
    order_of_trace = {trace: order for order, trace in orders.items()}
    if len(order_of_trace) != len(orders):
        failures.append("two orders were given the same trace id")

    rows = []
    for service, name in REQUIRED:
        missing = sorted(order for order, trace in orders.items()
                         if not any(s["service"] == service and s["name"] == name
                                    for s in by_trace.get(trace, ())))
        rows.append((f"orders whose trace has a `{name}` span from {service}",
                     len(orders), len(orders) - len(missing)))
        if missing:
            failures.append(f"{len(missing)} orders have no {name} span from {service} in their "
                            f"trace, e.g. {missing[:3]}")

    # No two orders in one trace: the gateways' server spans name the key they ran (its digest,
    # `idem.key_digest`); an order's trace holds one key per gateway, and that key shows up in
    # that trace only.
    traces_of_digest: dict[tuple[str, str], set[str]] = defaultdict(set)
    spans_of_digest: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for span in spans:
        digest = span["attributes"].get("idem.key_digest")
        if digest and span["service"] in ("order-gateway", "shipping-gateway"):
            traces_of_digest[(span["service"], digest)].add(span["trace_id"])
            spans_of_digest[(span["service"], digest)].append(span)
    alone, wrong = 0, []
    for order, trace in orders.items():
        keys = {key for key, traces in traces_of_digest.items() if trace in traces}
        services = Counter(service for service, _ in keys)
        elsewhere = [f"{s['service']}'s {s['name']} of its key in trace {s['trace_id']}"
                     + (" (a root span)" if not s["parent"] else "")
                     for key in sorted(keys) for s in spans_of_digest[key] if s["trace_id"] != trace]
        if services == Counter({"order-gateway": 1, "shipping-gateway": 1}) and not elsewhere:
            alone += 1
        elif services != Counter({"order-gateway": 1, "shipping-gateway": 1}):
            held = ", ".join(f"{n} keys of {s}" for s, n in sorted(services.items()))
            wrong.append(f"{order}'s trace holds {held or 'no key'}")
        else:
            wrong.append(f"{order}: {elsewhere[0]}")
    if wrong:
        failures.append(f"{len(wrong)} orders' keys are not each in one trace of their own "
                        f"(one key per gateway), e.g. " + "; ".join(wrong[:3]))
    rows.append(("orders whose trace holds their own key alone, one per gateway", len(orders),
                 alone))

    strays = Counter((s["service"], s["name"]) for s in spans
                     if s["trace_id"] not in order_of_trace)
    started = {k: n for k, n in strays.items() if k[1] in CONTINUED}
    rows.append(("hop spans outside every order's trace (a trace restarted)", 0,
                 sum(started.values())))
    if started:
        failures.append("spans outside every order's trace: " +
                        ", ".join(f"{n} {name} from {service}"
                                  for (service, name), n in sorted(started.items())))
    figures = {
        "spans": len(spans),
        "traces": len(by_trace),
        "order_traces": sum(1 for trace in orders.values() if trace in by_trace),
        "by_service": Counter(s["service"] for s in spans),
        "by_name": Counter((s["service"], s["name"]) for s in spans
                           if s["trace_id"] in order_of_trace),
        "stray": strays,
    }
    return rows, failures, figures


def tree(spans: list[dict], trace: str) -> list[str]:
    """One trace's spans as an indented tree, each under its parent, in start order."""
    mine = sorted((s for s in spans if s["trace_id"] == trace), key=lambda s: s["start"])
    ids = {s["span_id"] for s in mine}
    children: dict[str, list[dict]] = defaultdict(list)
    for span in mine:
        children[span["parent"] if span["parent"] in ids else ""].append(span)
    first = mine[0]["start"] if mine else 0
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in children.get(parent, ()):
            outcome = span["attributes"].get("idem.outcome")
            label = f"{'  ' * depth}{span['service']}: {span['name']}"
            lines.append(f"{label:<44} +{(span['start'] - first) / 1e6:7.1f} ms "
                         f"{(span['end'] - span['start']) / 1e6:7.1f} ms"
                         + (f"  idem.outcome={outcome}" if outcome else ""))
            walk(span["span_id"], depth + 1)

    walk("", 0)
    return lines
