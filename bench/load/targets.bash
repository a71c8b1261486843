# `scripts/load` (or `scripts/load targets`): the configurations the HTTP targets compare, in
# ROUNDS rounds, all at CONNECTIONS connections. Sourced by scripts/load, whose helpers it uses.
#
# Every server runs for the whole run: the upstream, nginx as a plain reverse proxy, and one
# gateway per configuration — the memory store (plain proxy, new keys, replays, the latency
# pass), the memory store sealing its records, SQLite, and (unless SERVER_STORES=0) PostgreSQL
# and MySQL (a scratch database on each server) and Redis (a redis-server of the harness's own),
# each store with its defaults. Each round measures every configuration once, in the reverse order in even rounds
# (ABBA), and each ratio is computed within a round: the report gives its median over the
# rounds, its range, and its value in each round.
#
# CPU: around each measurement the harness reads the CPU time of the gateway measured, of the
# upstream, of nginx, of the store's server (PostgreSQL's processes, MySQL's or MariaDB's,
# redis-server) and of wrk,
# and the whole machine's busy and stolen time (/proc/stat), each divided by the requests wrk
# made, so the report says where every request's CPU went, how busy the machine was, and each
# throughput target's CPU ceiling: the most its ratio can reach while the cores are the limit.
#
# SQLite's flushes: `perf stat` counts the gateway's fsync and fdatasync calls (kernel
# tracepoints: nothing stops the gateway) during each SQLite measurement, per new key.
#
# Round trips, counted on the servers around each PostgreSQL and MySQL measurement: the scratch
# database's committed transactions (pg_stat_database xact_commit: the store sends each batch as
# one statement, committed on its own), and MySQL's counters (SHOW GLOBAL STATUS, mysql_status in
# scripts/load), read again around each plain proxy measurement, when no request reaches a store:
# those are the whole server's, so what else it serves meanwhile is counted too.
#
# CONFIGURATIONS (optional) measures only the steps it names, in its order (the plain proxy,
# every ratio's baseline, among them).
#
# The report's four tables also go to RESULTS_DIR as targets-configurations.json,
# targets-ratios.json, targets-round-trips.json and targets-ceilings.json (bench/load/results.py;
# RESULTS_NAME in place of `targets`).

run_targets() {
  : >"$WORK/results"
  : >"$WORK/cpu"
  : >"$WORK/fsyncs"
  : >"$WORK/writer"
  : >"$WORK/server-counts"
  command -v perf >/dev/null || need perf linux-perf

  start_nginx
  # The memory gateways keep every key of the run (the default TTL is a day): their bounds are
  # raised above what a long run writes, so that the default 1 M keys never refuses one.
  local memory="memory://?max_keys=100000000&max_bytes=64GiB"
  # The sealed gateway's key ring: one key, 32 random bytes.
  echo "load:$(head -c 32 /dev/urandom | base64)" >"$WORK/keys"
  start_gateway "$memory" --encryption-key-file "$WORK/keys"
  SEALED_GATEWAY="$GATEWAY" SEALED_PID="$GATEWAY_PID"
  start_gateway "sqlite://$WORK/idem.db"
  SQLITE_GATEWAY="$GATEWAY" SQLITE_PID="$GATEWAY_PID"
  if [ "$SERVER_STORES" != 0 ]; then
    start_postgres_database
    start_mysql_database
    start_redis_server
    start_gateway "$(postgres_store idem_load)"
    POSTGRES_GATEWAY="$GATEWAY" POSTGRES_PID="$GATEWAY_PID"
    start_gateway "$(mysql_store)"
    MYSQL_GATEWAY="$GATEWAY" MYSQL_GATEWAY_PID="$GATEWAY_PID"
    MYSQL_VERSION="$("${MYSQL[@]}" -e 'SELECT VERSION()')"
    start_gateway "$REDIS_URL?prefix=idem-load"
    REDIS_GATEWAY="$GATEWAY" REDIS_GATEWAY_PID="$GATEWAY_PID"
  fi
  if [ -n "${BASELINE:-}" ]; then
    IDEM="$BASELINE" start_gateway "$memory"
    BASELINE_GATEWAY="$GATEWAY" BASELINE_PID="$GATEWAY_PID"
  fi
  start_gateway "$memory"
  MEMORY_GATEWAY="$GATEWAY" MEMORY_PID="$GATEWAY_PID"
  seed_replay_key

  local steps=(direct nginx_proxy plain_proxy memory_new_keys sqlite_new_keys replays sealed_new_keys
    latency)
  [ "$SERVER_STORES" != 0 ] && steps+=(postgres_new_keys mysql_new_keys redis_new_keys)
  [ -n "${BASELINE:-}" ] && steps+=(baseline_plain_proxy baseline_new_keys)
  if [ -n "${CONFIGURATIONS:-}" ]; then
    local chosen=() step
    for step in $CONFIGURATIONS; do
      if [[ " ${steps[*]} " != *" $step "* ]]; then
        echo "CONFIGURATIONS: $step is not one of: ${steps[*]}" >&2
        exit 2
      fi
      chosen+=("$step")
    done
    steps=("${chosen[@]}")
  fi
  local round
  for round in $(seq "$ROUNDS"); do
    echo "-- round $round of $ROUNDS" >&2
    in_round_order "$round" "${steps[@]}"
  done

  MYSQL_VERSION="${MYSQL_VERSION:-}" RESULTS_NAME="${RESULTS_NAME:-targets}" \
    python3 bench/load/targets_report.py "$WORK/results" \
    "$WORK/cpu" "$WORK/fsyncs" "$WORK/writer" "$WORK/server-counts" "$DURATION" "$CONNECTIONS" \
    "$(getconf CLK_TCK)" "$RESULTS_DIR" >"$REPORT"
  cat "$REPORT"
}

# start_nginx: nginx as a plain reverse proxy to the upstream, two workers (one per core),
# keeping up to 64 connections to the upstream open. Sets NGINX_URL and NGINX_PIDS.
start_nginx() {
  local port
  port="$(free_port)"
  mkdir -p "$WORK/nginx/logs"
  cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 2;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream api { server 127.0.0.1:$UPSTREAM_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://api;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
CONF
  "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g 'daemon off;' &
  local master=$!
  PIDS+=("$master")
  wait_port "$port"
  NGINX_URL="http://127.0.0.1:$port"
  NGINX_PIDS="$master $(pgrep -P "$master" | tr '\n' ' ')"
}

# postgres_pids, mysql_pids, redis_pids: the store servers' processes, for their CPU time.
postgres_pids() { pgrep -x postgres | tr '\n' ' '; }
mysql_pids() { echo "$MYSQL_PID"; }
redis_pids() { echo "$REDIS_PID"; }

# measure NAME URL KEYS CONNECTIONS GATEWAY_PIDS [STORE_PIDS_FUNCTION]: one wrk run (wrk_run),
# with the CPU time each party used during it appended to $WORK/cpu as "NAME requests machine
# busy, machine total, gateway, upstream, store, wrk, stolen" in clock ticks.
measure() {
  local name="$1" url="$2" keys="$3" conns="$4" gateway_pids="$5" store="${6:-}"
  local store_pids="" before after machine_before machine_after
  [ -n "$store" ] && store_pids="$("$store")"
  read -r -a machine_before < <(machine_ticks)
  before="$(proc_ticks $gateway_pids) $(proc_ticks "$UPSTREAM_PID") $(proc_ticks $store_pids)"
  WRK_TIME="$WORK/$name.time" wrk_run "$name" "$url" "$keys" "$conns"
  after="$(proc_ticks $gateway_pids) $(proc_ticks "$UPSTREAM_PID") $(proc_ticks $store_pids)"
  read -r -a machine_after < <(machine_ticks)
  python3 - "$name" "$(requests "$name")" "${machine_before[*]}" "${machine_after[*]}" \
    "$before" "$after" "$(cat "$WORK/$name.time")" "$(getconf CLK_TCK)" >>"$WORK/cpu" <<'PY'
import sys
name, requests = sys.argv[1], int(sys.argv[2])
mb, ma = [list(map(int, a.split())) for a in sys.argv[3:5]]
before, after = [list(map(int, a.split())) for a in sys.argv[5:7]]
wrk_seconds = sum(map(float, sys.argv[7].split()))
tck = int(sys.argv[8])
deltas = [b - a for a, b in zip(before, after)]
print(name, requests, ma[0] - mb[0], ma[1] - mb[1], *deltas, round(wrk_seconds * tck),
      ma[2] - mb[2])
PY
}

# proc_ticks PID...: the CPU time (user + system, in clock ticks) of the processes, summed.
proc_ticks() {
  local ticks=0 pid
  for pid in "$@"; do
    [ -r "/proc/$pid/stat" ] && ticks=$((ticks + $(cpu_ticks "$pid")))
  done
  echo "$ticks"
}

# machine_ticks: the machine's CPU time so far, in clock ticks: busy (user, nice, system, irq,
# softirq), all of it (idle, iowait and steal included), and stolen (the time a virtual
# machine's host ran something else while this machine had work to run).
machine_ticks() {
  awk '/^cpu / { busy = $2 + $3 + $4 + $7 + $8; print busy, busy + $5 + $6 + $9, $9 }' /proc/stat
}

# The steps of a round.
direct() { measure direct "$UPSTREAM" none "$CONNECTIONS" ""; }
nginx_proxy() { measure nginx "$NGINX_URL" none "$CONNECTIONS" "$NGINX_PIDS"; }
plain_proxy() {
  counted_on_servers plain_proxy measure plain_proxy "$MEMORY_GATEWAY" none "$CONNECTIONS" \
    "$MEMORY_PID"
}
memory_new_keys() { measure memory_new_keys "$MEMORY_GATEWAY" unique "$CONNECTIONS" "$MEMORY_PID"; }
replays() { measure replays "$MEMORY_GATEWAY" same "$CONNECTIONS" "$MEMORY_PID"; }
sealed_new_keys() { measure sealed_new_keys "$SEALED_GATEWAY" unique "$CONNECTIONS" "$SEALED_PID"; }
latency() {
  wrk_run direct_latency "$UPSTREAM" none 1
  wrk_run memory_latency "$MEMORY_GATEWAY" unique 1
}
sqlite_new_keys() {
  # perf counts the gateway's flushes in the kernel, without stopping it.
  perf stat -x, -e syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync -p "$SQLITE_PID" \
    -o "$WORK/perf.sqlite" &
  local perf=$!
  sleep 0.2
  # The store's one writer thread (named idem-sqlite-writer, which the kernel cuts to 15
  # characters): its CPU time over the measurement's wall time says how near it is to a core.
  local writer writer_before started
  writer="$(grep -lx idem-sqlite-wri /proc/"$SQLITE_PID"/task/*/comm | head -1 | cut -d/ -f5)"
  writer_before="$(cpu_ticks "$writer")"
  started="$(date +%s.%N)"
  measure sqlite_new_keys "$SQLITE_GATEWAY" unique "$CONNECTIONS" "$SQLITE_PID"
  echo "$(($(cpu_ticks "$writer") - writer_before))" \
    "$(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')" \
    "$(requests sqlite_new_keys)" >>"$WORK/writer"
  kill -INT "$perf"
  wait "$perf" 2>/dev/null || true
  echo "$(awk -F, '/sys_enter_f/ { n += $1 } END { print n + 0 }' "$WORK/perf.sqlite")" \
    "$(requests sqlite_new_keys)" >>"$WORK/fsyncs"
}
postgres_new_keys() {
  counted_on_servers postgres_new_keys measure postgres_new_keys "$POSTGRES_GATEWAY" unique \
    "$CONNECTIONS" "$POSTGRES_PID" postgres_pids
}
mysql_new_keys() {
  counted_on_servers mysql_new_keys measure mysql_new_keys "$MYSQL_GATEWAY" unique \
    "$CONNECTIONS" "$MYSQL_GATEWAY_PID" mysql_pids
}
redis_new_keys() {
  measure redis_new_keys "$REDIS_GATEWAY" unique "$CONNECTIONS" "$REDIS_GATEWAY_PID" redis_pids
}
baseline_plain_proxy() {
  measure baseline_plain_proxy "$BASELINE_GATEWAY" none "$CONNECTIONS" "$BASELINE_PID"
}
baseline_new_keys() {
  measure baseline_new_keys "$BASELINE_GATEWAY" unique "$CONNECTIONS" "$BASELINE_PID"
}

# counted_on_servers NAME COMMAND...: runs COMMAND, with the counters of the PostgreSQL and MySQL
# servers read before and after it (when they are measured), appended to $WORK/server-counts as
# "NAME requests seconds BEFORE... / AFTER...", each counter as "Name=value". A PostgreSQL
# backend reports its statistics at most once a second, and at once when it goes idle: the
# second reading waits for them.
counted_on_servers() {
  local name="$1" before="" after="" started ended
  shift
  [ "$SERVER_STORES" = 0 ] && { "$@"; return; }
  before="xact_commit=$(commits) $(mysql_status)"
  started="$(date +%s.%N)"
  "$@"
  ended="$(date +%s.%N)"
  [ "$name" = postgres_new_keys ] && sleep 1.5
  after="xact_commit=$(commits) $(mysql_status)"
  echo "$name $(requests "$name") $(awk -v s="$started" -v e="$ended" 'BEGIN { print e - s }')" \
    "$before / $after" >>"$WORK/server-counts"
}
