# `scripts/load counts`: what one new key costs each store, counted (not timed) at
# COUNT_CLIENTS concurrent clients (1 8 32 128 wrk connections), each count divided by the
# requests wrk made. Sourced by scripts/load, whose helpers it uses.
#
#   scripts/load counts                          # DURATION per point (10 s)
#   DURATION=3s COUNT_STORES=sqlite scripts/load counts
#
# - SQLite: fsync and fdatasync calls by the gateway, counted by `perf stat` at the kernel's
#   tracepoints for those two calls while wrk runs: nothing stops the gateway (strace would stop
#   it at each call, slowing it and changing how its writes meet in a commit).
# - PostgreSQL: commits in the scratch database (pg_stat_database's xact_commit), read before
#   the gateway starts and after it stopped and its connections reported their statistics.
# - Redis: script calls (EVALSHA, EVAL, FCALL), every command (INFO commandstats, those the
#   scripts run inside Redis included) and redis-server's read events (INFO stats'
#   total_reads_processed: one per batch of bytes read from a connection, so one per round trip
#   however many commands it carries), around the same start and stop.
# - MySQL: round trips (the counters of MYSQL_ROUND_TRIPS in scripts/load), commits (Com_commit)
#   and statements (Questions) of SHOW GLOBAL STATUS, around the same start and stop: the whole
#   server's, so what else it serves meanwhile is counted too.
#
# Figures go to $CARGO_TARGET_DIR/load-counts.txt, the table to load-counts.md and to RESULTS_DIR
# as counts.json (bench/load/results.py), and the chart to CHARTS_DIR.

COUNT_CLIENTS="${COUNT_CLIENTS:-1 8 32 128}"
COUNT_STORES="${COUNT_STORES:-sqlite postgres mysql redis}"
CHARTS_DIR="${CHARTS_DIR:-$CARGO_TARGET_DIR/load-charts}"
COUNTS="$CARGO_TARGET_DIR/load-counts.txt"
# The gateways' logs: a store under load may log a warning per slow statement.
GATEWAY_LOG="$CARGO_TARGET_DIR/load-gateway.log"
: >"$GATEWAY_LOG"

# count STORE CLIENTS METRIC VALUE: one count.
count() {
  echo "counts $*" >>"$COUNTS"
}

# count_run STORE CLIENTS: the last wrk run's requests and requests/s.
count_run() {
  local name rps rest
  read -r name rps rest < <(tail -1 "$WORK/results")
  count "$1" "$2" requests "$(requests "$name")"
  count "$1" "$2" rps "$rps"
}

counts_sqlite() {
  local clients="$1" perf
  rm -f "$WORK"/counts.db*
  start_gateway "sqlite://$WORK/counts.db"
  perf stat -x, -e syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync -p "$GATEWAY_PID" \
    -o "$WORK/perf.counts" &
  perf=$!
  sleep 0.2
  wrk_run "counts_sqlite_$clients" "$GATEWAY" unique "$clients"
  kill -INT "$perf"
  wait "$perf" 2>/dev/null || true
  stop_gateway
  count_run sqlite "$clients"
  count sqlite "$clients" fsyncs "$(awk -F, '/sys_enter_f/ { n += $1 } END { print n + 0 }' \
    "$WORK/perf.counts")"
}

counts_postgres() {
  local clients="$1" before after
  before="$(commits)"
  start_gateway "$PG_STORE"
  wrk_run "counts_postgres_$clients" "$GATEWAY" unique "$clients"
  stop_gateway_and_settle
  after="$(commits)"
  count_run postgres "$clients"
  count postgres "$clients" commits $((after - before))
}

counts_mysql() {
  local clients="$1" before after
  before="$(mysql_status)"
  start_gateway "$MYSQL_STORE"
  wrk_run "counts_mysql_$clients" "$GATEWAY" unique "$clients"
  stop_gateway_and_settle
  after="$(mysql_status)"
  count_run mysql "$clients"
  # shellcheck disable=SC2086 # a list of names
  count mysql "$clients" round_trips "$(mysql_growth "$before" "$after" $MYSQL_ROUND_TRIPS)"
  count mysql "$clients" transactions "$(mysql_growth "$before" "$after" Com_commit)"
  count mysql "$clients" statements "$(mysql_growth "$before" "$after" Questions)"
}

# redis_calls: every command Redis has run so far (INFO commandstats).
redis_calls() {
  redis-cli -p "$REDIS_PORT" INFO commandstats |
    awk -F '[:=,]' '/^cmdstat_/ { calls += $3 } END { print calls + 0 }'
}

# redis_scripts: the script calls Redis has run so far.
redis_scripts() {
  redis-cli -p "$REDIS_PORT" INFO commandstats |
    awk -F '[:=,]' '/^cmdstat_(evalsha|eval|evalsha_ro|eval_ro|fcall|fcall_ro):/ { calls += $3 }
      END { print calls + 0 }'
}

counts_redis() {
  local clients="$1" scripts calls reads
  scripts="$(redis_scripts)"
  calls="$(redis_calls)"
  reads="$(redis_stat stats total_reads_processed)"
  start_gateway "$REDIS_URL?prefix=idem-counts"
  wrk_run "counts_redis_$clients" "$GATEWAY" unique "$clients"
  stop_gateway_and_settle
  count_run redis "$clients"
  count redis "$clients" scripts $(($(redis_scripts) - scripts))
  count redis "$clients" commands $(($(redis_calls) - calls))
  count redis "$clients" reads $(($(redis_stat stats total_reads_processed) - reads))
}

run_counts() {
  : >"$WORK/results"
  : >"$COUNTS"
  local store clients
  for store in $COUNT_STORES; do
    case "$store" in
      sqlite) command -v perf >/dev/null || need perf linux-perf ;;
      postgres)
        start_postgres_database
        PG_STORE="$(postgres_store idem_counts)"
        ;;
      mysql)
        start_mysql_database
        MYSQL_STORE="$(mysql_store)"
        ;;
      redis) start_redis_server ;;
      *) echo "counts are for sqlite, postgres, mysql and redis, not $store" >&2; exit 2 ;;
    esac
    for clients in $COUNT_CLIENTS; do
      "counts_$store" "$clients"
    done
  done
  {
    echo "Counted per new key: \`scripts/load counts\`, $(date -u +%Y-%m-%d), $DURATION per" \
      "point, wrk with 2 threads (1 for one client)."
    echo
    "$BIN/idem-bench-curves" "$COUNTS" --charts "$CHARTS_DIR"
  } >"$CARGO_TARGET_DIR/load-counts.md"
  cat "$CARGO_TARGET_DIR/load-counts.md"
  python3 bench/load/results.py "$RESULTS_DIR" "$CARGO_TARGET_DIR/load-counts.md" \
    --note "$DURATION per point, wrk with 2 threads (1 for one client); SQLite's flushes counted by perf stat."
}
