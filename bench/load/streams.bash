# `scripts/load streams`: streamed responses through each proxy. Sourced by scripts/load, whose
# helpers it uses.
#
# The upstream's `/events` sends STREAM_EVENTS events (100 by default) STREAM_EVERY_MS apart (10),
# of unknown length, with `X-Accel-Buffering: no` so that nginx passes each on as it comes.
# idem-bench-streams reads STREAMS of them (128), STREAM_CONCURRENCY at a time (32), through: the
# upstream direct, nginx as a plain reverse proxy (bench/load/targets.bash's), the gateway as a
# plain proxy (no key), and the gateway with a new key per stream on the memory store and on
# SQLite, each recorded as it passes, each proxy a process of its own. For each it reports the
# time to the first byte and to the end (medians over the streams, then over ROUNDS rounds in ABBA
# order), and how much the proxy's resident memory grew per open stream while every worker had
# one open (the upstream's memory for the direct row): the most over the rounds, as a process
# keeps what it grew to hold the first time.
#
# The table goes to RESULTS_DIR as streams.json (bench/load/results.py).

# shellcheck source=bench/load/targets.bash
source bench/load/targets.bash

run_streams() {
  local events="${STREAM_EVENTS:-100}" every="${STREAM_EVERY_MS:-10}"
  local streams="${STREAMS:-128}" concurrency="${STREAM_CONCURRENCY:-32}"
  local path="/events?count=$events&every_ms=$every"
  : >"$WORK/streams"
  start_nginx
  start_gateway memory:// --in-flight wait
  local plain="$GATEWAY" plain_pid="$GATEWAY_PID"
  start_gateway memory:// --in-flight wait
  local memory="$GATEWAY" memory_pid="$GATEWAY_PID"
  start_gateway "sqlite://$WORK/streams.db" --in-flight wait
  local sqlite="$GATEWAY" sqlite_pid="$GATEWAY_PID"
  local nginx_workers
  nginx_workers="$(echo "$NGINX_PIDS" | cut -d' ' -f2-)"

  # stream NAME URL PIDS [--keys]: one measurement, appended to $WORK/streams as "NAME JSON".
  stream() {
    local name="$1" url="$2" pids="$3" pid_args=() pid
    shift 3
    for pid in $pids; do pid_args+=(--pid "$pid"); done
    echo "-- $name ($streams streams of $events events, $concurrency at a time)" >&2
    echo "$name $("$BIN/idem-bench-streams" "$url$path" --streams "$streams" \
      --concurrency "$concurrency" --events "$events" "${pid_args[@]}" "$@")" >>"$WORK/streams"
  }
  s_direct() { stream direct "$UPSTREAM" "$UPSTREAM_PID"; }
  s_nginx() { stream nginx "$NGINX_URL" "$nginx_workers"; }
  s_plain() { stream plain_proxy "$plain" "$plain_pid"; }
  s_memory() { stream memory_new_keys "$memory" "$memory_pid" --keys; }
  s_sqlite() { stream sqlite_new_keys "$sqlite" "$sqlite_pid" --keys; }

  local round
  for round in $(seq "$ROUNDS"); do
    echo "-- round $round of $ROUNDS" >&2
    in_round_order "$round" s_direct s_nginx s_plain s_memory s_sqlite
  done

  python3 - "$WORK/streams" "$RESULTS_DIR" "$events" "$every" "$streams" "$concurrency" \
    "$ROUNDS" <<'PY' | tee "$REPORT"
import json, statistics, sys
sys.path.insert(0, "bench/load")
import results

path, directory, events, every, streams, concurrency, rounds = sys.argv[1:]
runs = {}
for line in open(path):
    name, data = line.split(" ", 1)
    runs.setdefault(name, []).append(json.loads(data))
labels = {
    "direct": "upstream direct",
    "nginx": "nginx, reverse proxy",
    "plain_proxy": "gateway, plain proxy (no key)",
    "memory_new_keys": "gateway + memory store, new key per stream (recorded)",
    "sqlite_new_keys": "gateway + SQLite, new key per stream (recorded)",
}
median = lambda name, field: statistics.median(run[field] for run in runs[name])
rows = []
for name, label in labels.items():
    if name not in runs:
        continue
    memory = [run["rss_per_stream_kib"] for run in runs[name] if run["rss_per_stream_kib"] is not None]
    rows.append([
        label,
        f"{median(name, 'ttfb_p50_ms'):.2f} ms",
        f"{median(name, 'ttfb_p99_ms'):.2f} ms",
        f"{median(name, 'total_p50_ms'):,.0f} ms",
        f"{median(name, 'total_p99_ms'):,.0f} ms",
        f"{max(memory):,.0f} KiB" if memory else "—",
        f"{median(name, 'ttfb_p50_ms') / median('nginx', 'ttfb_p50_ms'):.2f}×",
    ])
columns = ["configuration", "first byte, p50", "first byte, p99", "whole stream, p50",
           "whole stream, p99", "memory per open stream", "first byte vs. nginx"]
ideal = (int(events) - 1) * int(every)
notes = [
    f"{streams} streams of {events} events {every} ms apart (the last {ideal:,} ms after the "
    f"first), {concurrency} at a time, each on a keep-alive connection; medians of "
    f"{rounds} rounds. Memory: the proxy's resident memory (nginx's workers, summed) with "
    f"{concurrency} streams open, less before, over {concurrency}; the most over the rounds, "
    "as a process keeps what it grew to hold the first time (the later rounds add about none)."
]
import datetime, os
today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
print(f"`{os.environ.get('LOAD_COMMAND', 'scripts/load streams')}`, {today}.\n")
results.print_table(directory, "streams", columns, rows, notes)
PY
}
