"""The report of `scripts/load peers`: idem's gateway against idempotent-proxy-server on the same
Redis, idem-http's layer against the idempotent crate's in process, and each ratio round by
round, as markdown; with RESULTS_DIR, each of its three tables also as a result file there
(bench/load/results.py): peers-gateways.json, peers-layers.json and peers-ratios.json, which
docs/benchmarks.md shows.

Usage: peers_report.py RESULTS CPU DURATION CONNECTIONS CLK_TCK [RESULTS_DIR]

RESULTS has one line per measurement, "name requests/s p50_ms p99_ms", in the order of the runs
(wrk's for the gateways, idem-peers-layers' in process); CPU one per gateway measurement, "name
requests machine_busy machine_total gateway upstream store wrk stolen" in clock ticks
(bench/load/targets.bash's `measure`).
"""

import datetime
import os
import statistics
import sys

from results import print_table, read_cpu, read_runs

results, cpu_file, duration, connections, clk_tck = sys.argv[1:6]
results_dir = sys.argv[6] if len(sys.argv) > 6 else None
tick_us = 1e6 / float(clk_tck)

runs = read_runs(results)  # name -> [(rps, p50, p99)], one per round
cpu = read_cpu(cpu_file)  # name -> [[requests, busy, total, gateway, upstream, store, wrk, stolen]]
rounds = len(runs["idem_new_keys"])


def median(name, column):
    return statistics.median(run[column] for run in runs[name])


def table(name, columns, rows, notes=()):
    """Prints a table of the report, its notes under it, and writes its result file."""
    print_table(results_dir, name, columns, rows, notes)


print(f"`{os.environ.get('LOAD_COMMAND', 'scripts/load peers')}`, "
      f"{datetime.datetime.now(datetime.timezone.utc).date().isoformat()}.\n")

GATEWAYS = [
    ("idem_new_keys", "idem + Redis, new key per request"),
    ("peer_new_keys", "idempotent-proxy-server + Redis, new key per request"),
    ("idem_replays", "idem + Redis, replays only"),
    ("peer_replays", "idempotent-proxy-server + Redis, replays only"),
]
rows = []
for key, label in GATEWAYS:
    rps, p50, p99 = (median(key, c) for c in range(3))
    per_request = lambda col: statistics.median(r[col] * tick_us / r[0] for r in cpu[key])
    share = lambda col: statistics.median(r[col] / r[2] for r in cpu[key])
    rows.append([
        label, f"{rps:,.0f}", f"{p50:.2f} ms", f"{p99:.2f} ms",
        f"{per_request(3):.0f} µs", f"{per_request(5):.0f} µs", f"{per_request(4):.0f} µs",
        f"{per_request(6):.0f} µs", f"{share(1):.0%}", f"{share(7):.0%}",
    ])
table(
    "peers-gateways",
    ["configuration", "requests/s", "p50", "p99", "CPU per request: gateway", "redis-server",
     "upstream", "wrk", "machine busy", "stolen"],
    rows,
    [f"{connections} connections, {duration} per configuration, wrk with 2 threads; medians of "
     f"{rounds} rounds."],
)

LAYERS = [
    ("layer_none", "the handler alone"),
    ("layer_idem_new_keys", "idem-http + idem-core's memory store, new key per request"),
    ("layer_idempotent_new_keys", "idempotent + its memory store, new key per request"),
    ("layer_idem_raw_new_keys", "idem-http, raw fingerprints, new key per request"),
    ("layer_idem_replays", "idem-http + idem-core's memory store, replays only"),
    ("layer_idempotent_replays", "idempotent + its memory store, replays only"),
    ("layer_idem_raw_replays", "idem-http, raw fingerprints, replays only"),
]
bare = median("layer_none", 0)
rows = []
for key, label in LAYERS:
    rps, p50, p99 = (median(key, c) for c in range(3))
    rows.append([label, f"{rps:,.0f}", f"{p50:.3f} ms", f"{p99:.3f} ms", f"{rps / bare:.2f}×"])
table(
    "peers-layers",
    ["in process", "requests/s", "p50", "p99", "vs. the handler alone"],
    rows,
    [f"{connections} concurrent tasks, {duration} per configuration, a process of its own for "
     f"each; medians of {rounds} rounds."],
)

x = lambda v: f"{v:.2f}×"
targets = [
    ("idem / idempotent-proxy-server, new keys (both on Redis)", "peer_new_keys", "idem_new_keys", 2.0),
    ("idem / idempotent-proxy-server, replays (both on Redis)", "peer_replays", "idem_replays", 2.0),
    ("idem-http / idempotent, new keys (in process)", "layer_idempotent_new_keys", "layer_idem_new_keys", 1.5),
    ("idem-http / idempotent, replays (in process)", "layer_idempotent_replays", "layer_idem_replays", 1.2),
    ("idem-http with raw fingerprints / idempotent, new keys (in process)", "layer_idempotent_new_keys", "layer_idem_raw_new_keys", None),
    ("idem-http with raw fingerprints / idempotent, replays (in process)", "layer_idempotent_replays", "layer_idem_raw_replays", None),
]
rows = []
for label, peer, ours, goal in targets:
    values = [o[0] / p[0] for p, o in zip(runs[peer], runs[ours])]
    m = statistics.median(values)
    spread = f" ({x(min(values))}–{x(max(values))})" if rounds > 1 else ""
    if goal is None:
        rows.append([label, f"{x(m)}{spread}", ", ".join(x(v) for v in values), "(reported)", "—"])
    else:
        rows.append([label, f"**{x(m)}**{spread}", ", ".join(x(v) for v in values),
                     f"≥ {x(goal)}", "yes" if m >= goal else "**no**"])
table(
    "peers-ratios",
    ["target", f"median of {rounds} rounds (range)", "each round", "goal", "met"],
    rows,
    [f"Each ratio is computed within a round: the median of the {rounds} rounds, their range in "
     "brackets."],
)
