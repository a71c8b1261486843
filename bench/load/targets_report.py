"""The report of `scripts/load` (targets): the configurations' figures, where each request's CPU
went, every target's ratio round by round, and the round trips the server stores counted, as
markdown; with RESULTS_DIR, each of its four tables also as a result file there
(bench/load/results.py): targets-configurations.json, targets-ratios.json,
targets-round-trips.json and targets-ceilings.json, which docs/benchmarks.md shows
(RESULTS_NAME, in the environment, in place of `targets`).

Usage: targets_report.py RESULTS CPU FSYNCS WRITER SERVER_COUNTS DURATION CONNECTIONS CLK_TCK
       [RESULTS_DIR]

RESULTS has one line per wrk run, "name requests/s p50_ms p99_ms", in the order of the runs; CPU
one per measured run, "name requests machine_busy machine_total gateway upstream store wrk
stolen" in clock ticks; FSYNCS one per SQLite run, "flushes requests"; WRITER one per SQLite
run, "ticks seconds requests": the CPU time of the store's writer thread, the run's wall time,
its requests; SERVER_COUNTS one per run counted on the servers, "name requests seconds
Counter=value... / Counter=value...", the counters before and after it. MYSQL_VERSION (in the
environment) names the MySQL server measured.
"""

import datetime
import os
import statistics
import sys

from results import print_table, read_cpu, read_runs, read_server_counts

(results, cpu_file, fsyncs_file, writer_file, server_counts_file, duration, connections,
 clk_tck) = sys.argv[1:9]
results_dir = sys.argv[9] if len(sys.argv) > 9 else None
tick_us = 1e6 / float(clk_tck)

runs = read_runs(results)  # name -> [(rps, p50, p99)], one per round
cpu = read_cpu(cpu_file)  # name -> [[requests, busy, total, gateway, upstream, store, wrk, stolen]]
fsyncs = [tuple(map(float, line.split())) for line in open(fsyncs_file)]
writer = [tuple(map(float, line.split())) for line in open(writer_file)]
server_counts = read_server_counts(server_counts_file)  # name -> [(requests, seconds, deltas)]
rounds = len(runs["plain_proxy"])
results_name = os.environ.get("RESULTS_NAME") or "targets"


def median(name, column):
    return statistics.median(run[column] for run in runs[name])


def machine_share(name, column):
    """The median over the rounds of `name` of the machine's time in CPU column `column` (busy 1,
    stolen 7) over all its time (column 2)."""
    return statistics.median(r[column] / r[2] for r in cpu[name])


def each_round(f, *names):
    """f over each round's figures of `names`, in round order."""
    return [f(*figures) for figures in zip(*(runs[name] for name in names))]


LABELS = [
    ("direct", "upstream direct"),
    ("nginx", "nginx, plain reverse proxy"),
    ("plain_proxy", "gateway, plain proxy (no key)"),
    ("memory_new_keys", "gateway + memory, new key per request"),
    ("replays", "gateway + memory, replays only"),
    ("sealed_new_keys", "gateway + memory, sealed records, new keys"),
    ("sqlite_new_keys", "gateway + SQLite, new key per request"),
    ("postgres_new_keys", "gateway + PostgreSQL, new key per request"),
    ("mysql_new_keys", "gateway + MySQL, new key per request"),
    ("redis_new_keys", "gateway + Redis, new key per request"),
    ("baseline_plain_proxy", "`BASELINE` gateway, plain proxy"),
    ("baseline_new_keys", "`BASELINE` gateway + memory, new keys"),
]


# The configurations whose store is a server of its own, whose CPU time is measured.
STORE_SERVERS = ("postgres_new_keys", "mysql_new_keys", "redis_new_keys")


def table(name, columns, rows, notes=()):
    """Prints a table of the report, its notes under it, and writes its result file."""
    print_table(results_dir, f"{results_name}-{name}", columns, rows, notes)


settings = (
    f"{connections} connections, {duration} per configuration, wrk with 2 threads; medians of "
    f"{rounds} rounds."
)
print(f"`{os.environ.get('LOAD_COMMAND', 'scripts/load')}`, "
      f"{datetime.datetime.now(datetime.timezone.utc).date().isoformat()}.\n")
proxy = median("plain_proxy", 0)
rows = []
for key, label in LABELS:
    if key not in runs:
        continue
    rps, p50, p99 = (median(key, c) for c in range(3))
    cells = ["—"] * 6
    if key in cpu:
        per_request = lambda col: statistics.median(
            r[col] * tick_us / r[0] for r in cpu[key]
        )
        cells = [
            f"{per_request(3):.0f} µs" if key != "direct" else "—",
            f"{per_request(5):.0f} µs" if key in STORE_SERVERS else "—",
            f"{per_request(4):.0f} µs",
            f"{per_request(6):.0f} µs",
            f"{machine_share(key, 1):.0%}",
            f"{machine_share(key, 7):.0%}",
        ]
    rows.append([label, f"{rps:,.0f}", f"{p50:.2f} ms", f"{p99:.2f} ms", f"{rps / proxy:.2f}×"] + cells)
table(
    "configurations",
    ["configuration", "requests/s", "p50", "p99", "vs. plain proxy",
     "CPU per request: proxy or gateway", "store server", "upstream", "wrk", "machine busy",
     "stolen"],
    rows,
    [settings] + ([f"The MySQL server: {os.environ['MYSQL_VERSION']}."]
                  if "mysql_new_keys" in runs and os.environ.get("MYSQL_VERSION") else []),
)

x = lambda v: f"{v:.2f}×"
# MySQL's target is PostgreSQL's ratio of the same run, at its median.
postgres_ratio = (
    statistics.median(each_round(lambda p, g: g[0] / p[0], "plain_proxy", "postgres_new_keys"))
    if "postgres_new_keys" in runs else float("inf")
)
ms = lambda v: f"{v:.3f} ms"
per_key = lambda v: f"{v:.2f}"
targets = [
    ("gateway plain proxy / nginx", ("nginx", "plain_proxy"), lambda n, p: p[0] / n[0], x, "≥ 0.8×", lambda v: v >= 0.8),
    ("memory store, new keys / plain proxy", ("plain_proxy", "memory_new_keys"), lambda p, m: m[0] / p[0], x, "≥ 0.9×", lambda v: v >= 0.9),
    ("replays / plain proxy", ("plain_proxy", "replays"), lambda p, r: r[0] / p[0], x, "≥ 1.5×", lambda v: v >= 1.5),
    ("added p50 latency, memory store, 1 connection", ("direct_latency", "memory_latency"), lambda d, m: m[1] - d[1], ms, "≤ 0.1 ms", lambda v: v <= 0.1),
    ("SQLite (synchronous=FULL), new keys / memory store", ("memory_new_keys", "sqlite_new_keys"), lambda m, s: s[0] / m[0], x, "≥ 0.5×", lambda v: v >= 0.5),
    ("SQLite p99 / memory store p99", ("memory_new_keys", "sqlite_new_keys"), lambda m, s: s[2] / m[2], x, "≤ 5×", lambda v: v <= 5),
    ("PostgreSQL, new keys / plain proxy", ("plain_proxy", "postgres_new_keys"), lambda p, g: g[0] / p[0], x, "≥ 0.3×", lambda v: v >= 0.3),
    ("MySQL, new keys / plain proxy", ("plain_proxy", "mysql_new_keys"), lambda p, m: m[0] / p[0], x, "≥ PostgreSQL's", lambda v: v >= postgres_ratio),
    ("MySQL / PostgreSQL, new keys", ("postgres_new_keys", "mysql_new_keys"), lambda g, m: m[0] / g[0], x, "(reported)", None),
    ("Redis, new keys / plain proxy", ("plain_proxy", "redis_new_keys"), lambda p, r: r[0] / p[0], x, "≥ 0.6×", lambda v: v >= 0.6),
    ("memory store, new keys: sealed / not sealed", ("memory_new_keys", "sealed_new_keys"), lambda m, s: s[0] / m[0], x, "≥ 0.9×", lambda v: v >= 0.9),
    ("plain proxy: this build / `BASELINE`", ("baseline_plain_proxy", "plain_proxy"), lambda b, p: p[0] / b[0], x, "(reported)", None),
    ("memory new keys: this build / `BASELINE`", ("baseline_new_keys", "memory_new_keys"), lambda b, m: m[0] / b[0], x, "(reported)", None),
]
rows = []
for label, names, f, fmt, goal, met in targets:
    if not all(name in runs for name in names):
        continue
    values = each_round(f, *names)
    m = statistics.median(values)
    spread = f" ({fmt(min(values))}–{fmt(max(values))})" if rounds > 1 else ""
    verdict = "—" if met is None else ("yes" if met(m) else "**no**")
    rows.append([label, f"**{fmt(m)}**{spread}", ", ".join(fmt(v) for v in values), goal, verdict])
if fsyncs:
    values = [flushes / requests for flushes, requests in fsyncs]
    m = statistics.median(values)
    rows.append([
        "SQLite: fsync + fdatasync per new key (perf stat, the gateway)",
        f"**{per_key(m)}** ({per_key(min(values))}–{per_key(max(values))})",
        ", ".join(per_key(v) for v in values),
        "≤ 0.25",
        "yes" if m <= 0.25 else "**no**",
    ])
table(
    "ratios",
    ["target", f"median of {rounds} rounds (range)", "each round", "goal", "met"],
    rows,
    [f"Each ratio is computed within a round: the median of the {rounds} rounds, their range in "
     "brackets."],
)

# Round trips per new key, counted on the servers. PostgreSQL: the store sends each batch as one
# statement in a transaction of its own, and each read too, so the scratch database's committed
# transactions are its round trips. MySQL: the counters that scripts/load names in
# MYSQL_ROUND_TRIPS, why there.
MYSQL_ROUND_TRIPS = os.environ.get("MYSQL_ROUND_TRIPS", "").split()
COUNTED = [
    ("PostgreSQL", "postgres_new_keys",
     "round trips: transactions committed in the scratch database (pg_stat_database "
     "xact_commit), one statement each", lambda d: d["xact_commit"]),
    ("MySQL", "mysql_new_keys",
     "round trips: " + " + ".join(MYSQL_ROUND_TRIPS) + " (SHOW GLOBAL STATUS)",
     lambda d: sum(d[c] for c in MYSQL_ROUND_TRIPS)),
    ("MySQL", "mysql_new_keys", "of them batches of writes (Com_begin)", lambda d: d["Com_begin"]),
    ("MySQL", "mysql_new_keys", "transactions committed (Com_commit)", lambda d: d["Com_commit"]),
    ("MySQL", "mysql_new_keys", "statements (Questions: each statement of a text)",
     lambda d: d["Questions"]),
    ("MySQL", "mysql_new_keys", "INSERT, SELECT, UPDATE, DELETE (Com_insert, Com_select, "
     "Com_update, Com_delete)", None),
    ("MySQL", "mysql_new_keys", "deadlocks (Innodb_deadlocks)", lambda d: d["Innodb_deadlocks"]),
    ("MySQL", "mysql_new_keys", "row lock waits (Innodb_row_lock_waits)",
     lambda d: d["Innodb_row_lock_waits"]),
]
rows = []
for store, name, what, f in COUNTED:
    if name not in server_counts:
        continue
    counted = server_counts[name]
    if f is None:
        kinds = ("Com_insert", "Com_select", "Com_update", "Com_delete")
        per_key = lambda c: [d[c] / requests for requests, _, d in counted]
        rows.append([store, what,
                     " / ".join(f"{statistics.median(per_key(c)):.2f}" for c in kinds),
                     ", ".join(" / ".join(f"{d[c] / requests:.2f}" for c in kinds)
                               for requests, _, d in counted)])
        continue
    values = [f(d) / requests for requests, _, d in counted]
    m = statistics.median(values)
    fmt = lambda v: f"{v:.3f}"
    spread = f" ({fmt(min(values))}–{fmt(max(values))})" if len(values) > 1 else ""
    rows.append([store, what, f"**{fmt(m)}**{spread}", ", ".join(fmt(v) for v in values)])
notes = [f"Each count is divided by the new keys wrk was served in that measurement; the median "
         f"of the {rounds} rounds, their range in brackets."]
if "mysql_new_keys" in server_counts and "plain_proxy" in server_counts:
    # SHOW GLOBAL STATUS counts every client of the server: what it counted while no request
    # reached a store is what else the server was serving.
    per_second = lambda name: statistics.median(
        sum(d[c] for c in MYSQL_ROUND_TRIPS) / seconds for _, seconds, d in server_counts[name]
    )
    background, during = per_second("plain_proxy"), per_second("mysql_new_keys")
    keys_per_second = statistics.median(
        requests / seconds for requests, seconds, _ in server_counts["mysql_new_keys"]
    )
    notes.append(
        f"MySQL's counters are the whole server's: during the plain proxy's measurements, when "
        f"no request reached a store, the server counted {background:,.0f} round trips a second "
        f"from its other clients, against {during:,.0f} during MySQL's, which served "
        f"{keys_per_second:,.0f} new keys a second (medians, over each measurement's wall "
        f"time): at that rate the other clients' share of the round trips per new key is about "
        f"{background / keys_per_second:.3f}."
    )
table(
    "round-trips",
    ["store", "counted on the server, per new key", f"median of {rounds} rounds (range)",
     "each round"],
    rows,
    notes,
)

# The CPU ceilings: every party of a measurement (the gateway or proxy, the store's server, the
# upstream, wrk) shares the machine's cores, so while the cores are the limit, a ratio of two
# configurations cannot pass the inverse ratio of their CPU per request, all parties together.
ceilings = [
    ("gateway plain proxy / nginx", "nginx", "plain_proxy"),
    ("memory store, new keys / plain proxy", "plain_proxy", "memory_new_keys"),
    ("SQLite, new keys / memory store", "memory_new_keys", "sqlite_new_keys"),
    ("PostgreSQL, new keys / plain proxy", "plain_proxy", "postgres_new_keys"),
    ("MySQL, new keys / plain proxy", "plain_proxy", "mysql_new_keys"),
    ("Redis, new keys / plain proxy", "plain_proxy", "redis_new_keys"),
]


def all_parties_us(run):
    requests, _busy, _total, gateway, upstream, store, wrk, _stolen = run
    return (gateway + upstream + store + wrk) * tick_us / requests


rows = []
for label, base, name in ceilings:
    if base not in cpu or name not in cpu:
        continue
    base_us = [all_parties_us(run) for run in cpu[base]]
    name_us = [all_parties_us(run) for run in cpu[name]]
    ceiling = [b / n for b, n in zip(base_us, name_us)]
    measured = each_round(lambda b, n: n[0] / b[0], base, name)
    share = [m / c for m, c in zip(measured, ceiling)]
    rows.append([
        label,
        f"{statistics.median(base_us):.0f} → {statistics.median(name_us):.0f} µs",
        f"{statistics.median(ceiling):.2f}×",
        f"{statistics.median(measured):.2f}×",
        f"{statistics.median(share):.0%}",
        f"{machine_share(name, 1):.0%}, {machine_share(name, 7):.0%}",
    ])

notes = []
if writer:
    # SQLite has one writer thread: a new key's two writes are its statements and its share of a
    # commit. Near one core, the writer is the limit, however many cores are free.
    writer_us = statistics.median(ticks * tick_us / requests for ticks, _, requests in writer)
    core = statistics.median(ticks / float(clk_tck) / seconds for ticks, seconds, _ in writer)
    notes.append(
        f"SQLite's writer thread: {writer_us:.0f} µs per new key, busy {core:.0%} of one core "
        f"(medians of {len(writer)} rounds)."
    )
table(
    "ceilings",
    ["ratio", "CPU per request, all parties", "its CPU ceiling", "measured", "measured / ceiling",
     "machine busy, stolen"],
    rows,
    notes,
)
