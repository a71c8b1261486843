"""The report of `scripts/load` (targets): the configurations' figures, where each request's CPU
went, and every target's ratio round by round, as markdown; with RESULTS_DIR, each of its three
tables also as a result file there (bench/load/results.py): targets-configurations.json,
targets-ratios.json and targets-ceilings.json, which docs/benchmarks.md shows.

Usage: targets_report.py RESULTS CPU FSYNCS WRITER DURATION CONNECTIONS CLK_TCK [RESULTS_DIR]

RESULTS has one line per wrk run, "name requests/s p50_ms p99_ms", in the order of the runs; CPU
one per measured run, "name requests machine_busy machine_total gateway upstream store wrk
stolen" in clock ticks; FSYNCS one per SQLite run, "flushes requests"; WRITER one per SQLite
run, "ticks seconds requests": the CPU time of the store's writer thread, the run's wall time,
its requests.
"""

import datetime
import os
import statistics
import sys

from results import print_table, read_cpu, read_runs

results, cpu_file, fsyncs_file, writer_file, duration, connections, clk_tck = sys.argv[1:8]
results_dir = sys.argv[8] if len(sys.argv) > 8 else None
tick_us = 1e6 / float(clk_tck)

runs = read_runs(results)  # name -> [(rps, p50, p99)], one per round
cpu = read_cpu(cpu_file)  # name -> [[requests, busy, total, gateway, upstream, store, wrk, stolen]]
fsyncs = [tuple(map(float, line.split())) for line in open(fsyncs_file)]
writer = [tuple(map(float, line.split())) for line in open(writer_file)]
rounds = len(runs["plain_proxy"])


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
    ("redis_new_keys", "gateway + Redis, new key per request"),
    ("baseline_plain_proxy", "`BASELINE` gateway, plain proxy"),
    ("baseline_new_keys", "`BASELINE` gateway + memory, new keys"),
]


def table(name, columns, rows, notes=()):
    """Prints a table of the report, its notes under it, and writes its result file."""
    print_table(results_dir, name, columns, rows, notes)


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
            f"{per_request(5):.0f} µs" if key in ("postgres_new_keys", "redis_new_keys") else "—",
            f"{per_request(4):.0f} µs",
            f"{per_request(6):.0f} µs",
            f"{machine_share(key, 1):.0%}",
            f"{machine_share(key, 7):.0%}",
        ]
    rows.append([label, f"{rps:,.0f}", f"{p50:.2f} ms", f"{p99:.2f} ms", f"{rps / proxy:.2f}×"] + cells)
table(
    "targets-configurations",
    ["configuration", "requests/s", "p50", "p99", "vs. plain proxy",
     "CPU per request: proxy or gateway", "store server", "upstream", "wrk", "machine busy",
     "stolen"],
    rows,
    [settings],
)

x = lambda v: f"{v:.2f}×"
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
    "targets-ratios",
    ["target", f"median of {rounds} rounds (range)", "each round", "goal", "met"],
    rows,
    [f"Each ratio is computed within a round: the median of the {rounds} rounds, their range in "
     "brackets."],
)

# The CPU ceilings: every party of a measurement (the gateway or proxy, the store's server, the
# upstream, wrk) shares the machine's cores, so while the cores are the limit, a ratio of two
# configurations cannot pass the inverse ratio of their CPU per request, all parties together.
ceilings = [
    ("gateway plain proxy / nginx", "nginx", "plain_proxy"),
    ("memory store, new keys / plain proxy", "plain_proxy", "memory_new_keys"),
    ("SQLite, new keys / memory store", "memory_new_keys", "sqlite_new_keys"),
    ("PostgreSQL, new keys / plain proxy", "plain_proxy", "postgres_new_keys"),
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
    "targets-ceilings",
    ["ratio", "CPU per request, all parties", "its CPU ceiling", "measured", "measured / ceiling",
     "machine busy, stolen"],
    rows,
    notes,
)
