# `scripts/load curves`: how the gateway's cost grows with the work. Sourced by scripts/load,
# whose helpers it uses (wrk_run, start_gateway, the scratch PostgreSQL database, the Redis
# server of its own).
#
#   scripts/load curves                          # the full form
#   SHORT=1 scripts/load curves                  # the short form: 2 s per point, 100 k keys
#   CURVES_RUN="keys purge" scripts/load curves  # only some of the curves
#
# Every curve is measured in one run, next to the plain proxy of the same run:
#
# - connections (CURVE_CONNECTIONS, 1 32 256 1024): the upstream direct, the plain proxy and the
#   memory store's new keys, requests/s and p99, in CURVE_ROUNDS rounds; each against itself at 32
#   connections (the upstream direct shows what wrk, the kernel and the upstream lose with more
#   connections, whatever the gateway does);
# - body size (CURVE_BODIES, 100 B to 1 MiB of JSON, fingerprinted as JSON): the same two, at
#   CONNECTIONS, each against the plain proxy at the same size;
# - stored keys (CURVE_KEYS, 0 to 10 M, on CURVE_STORES): the store is filled to each point, then
#   the gateway's new keys at CONNECTIONS are measured on it; bytes per key from the gateway's
#   resident memory (memory), the file (SQLite), pg_total_relation_size (PostgreSQL), InnoDB's
#   data and index length of the store's tables (MySQL) and used_memory (Redis), each the growth since the empty store divided by the keys stored;
# - purge (PURGE_KEYS expired keys, 1 M, on PURGE_STORES): the gateway starts on a store holding
#   only expired keys, so that its purge loop (which runs at start, then every minute, 1,000
#   records per store call, its calls paced to a quarter of the round's time) removes them while
#   wrk measures new keys in 1 s windows; the purge's duration is the time its store calls took
#   (the idem_store_duration_seconds metric) and the windows it ran through, and its cost is the
#   windows' new keys/s against the same gateway's once the purge is done;
# - census (CENSUS_KEYS live records, 1 M, on CENSUS_STORES): the gateway starts on a store
#   holding them and takes its first census at once (at the default pace, 5% of the store's
#   time), then rests as long as it took and counts again; wrk measures new keys in 1 s windows
#   throughout (CENSUS_GAP seconds apart, 4 by default, so that the new keys do not outgrow the
#   census), each window classed by /v1/stats' `counting` before and after it, until
#   CENSUS_WINDOWS windows during a census and as many outside one; the census's cost is the mean
#   of the windows during one against the mean of those outside. The same gateway then pages
#   through the records (the admin API's listing, 100 records a page, one page after another)
#   while wrk measures new keys again, for the listing's cost.
#
# SQLite, PostgreSQL, MySQL and Redis are filled directly by idem-bench-fill, through the store's own
# API with 64 calls at a time (10 M keys through the gateway would take hours on SQLite); the
# memory store lives in the gateway's process, so it is filled through the gateway by wrk.
# Figures go to $CARGO_TARGET_DIR/load-curves.txt (one `CURVE SERIES X METRIC VALUE` line per
# measurement), the tables to load-curves.md, the charts to CHARTS_DIR, and each curve's table to
# RESULTS_DIR as curve-CURVE.json (curve-connections, curve-body, curve-keys, curve-purge: the
# curves of this run only; bench/load/results.py).

if [ "${SHORT:-0}" != 0 ]; then
  CURVE_ROUNDS="${CURVE_ROUNDS:-1}"
  CURVE_KEYS="${CURVE_KEYS:-0 10000 100000}"
  PURGE_KEYS="${PURGE_KEYS:-100000}"
  CENSUS_KEYS="${CENSUS_KEYS:-100000}"
  CENSUS_WINDOWS="${CENSUS_WINDOWS:-3}"
fi
CURVE_ROUNDS="${CURVE_ROUNDS:-3}"
CURVE_CONNECTIONS="${CURVE_CONNECTIONS:-1 32 256 1024}"
CURVE_BODIES="${CURVE_BODIES:-100 16384 262144 1048576}"
CURVE_KEYS="${CURVE_KEYS:-0 100000 1000000 10000000}"
CURVE_STORES="${CURVE_STORES:-memory sqlite postgres mysql redis}"
PURGE_KEYS="${PURGE_KEYS:-1000000}"
PURGE_STORES="${PURGE_STORES:-sqlite postgres mysql}"
CENSUS_KEYS="${CENSUS_KEYS:-1000000}"
CENSUS_STORES="${CENSUS_STORES:-sqlite postgres mysql redis}"
CENSUS_WINDOWS="${CENSUS_WINDOWS:-10}"
CENSUS_GAP="${CENSUS_GAP:-4}"
CURVES_RUN="${CURVES_RUN:-connections body keys purge census}"
CHARTS_DIR="${CHARTS_DIR:-$CARGO_TARGET_DIR/load-charts}"
CURVES="$CARGO_TARGET_DIR/load-curves.txt"
# The gateways' logs: a store under load may log a warning per slow statement.
GATEWAY_LOG="$CARGO_TARGET_DIR/load-gateway.log"
: >"$GATEWAY_LOG"
# The memory store's bounds, far above what a curve stores (its defaults, 1 M keys and 1 GiB,
# would refuse the stored-keys curve's keys).
MEMORY_STORE="memory://?max_keys=100000000&max_bytes=64GiB"
FILL_CONCURRENCY="${FILL_CONCURRENCY:-64}"

# in_list WORD LIST: whether WORD is one of the words of LIST.
in_list() {
  case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac
}

# record CURVE SERIES X METRIC VALUE: one measurement of the curves.
record() {
  echo "$*" >>"$CURVES"
}

# record_run CURVE SERIES X: the last wrk run's requests/s, p50 and p99.
record_run() {
  local name rps p50 p99
  read -r name rps p50 p99 < <(tail -1 "$WORK/results")
  record "$1" "$2" "$3" rps "$rps"
  record "$1" "$2" "$3" p50_ms "$p50"
  record "$1" "$2" "$3" p99_ms "$p99"
}

# fill STORE_URL KEYS FROM [FLAG...]: writes KEYS records fill-FROM… into the store.
fill() {
  local store="$1" keys="$2" from="$3"
  shift 3
  echo "-- filling $keys keys into $store" >&2
  "$BIN/idem-bench-fill" --store "$store" --keys "$keys" --from "$from" \
    --concurrency "$FILL_CONCURRENCY" "$@"
}

# The points of the connections and body curves, as functions without arguments for
# in_round_order; CURVE_X is the point.
connections_direct() { wrk_run "connections_direct_$CURVE_X" "$UPSTREAM" none "$CURVE_X"; record_run connections direct "$CURVE_X"; }
connections_plain() { wrk_run "connections_plain_$CURVE_X" "$GATEWAY" none "$CURVE_X"; record_run connections plain_proxy "$CURVE_X"; }
connections_memory() { wrk_run "connections_memory_$CURVE_X" "$GATEWAY" unique "$CURVE_X"; record_run connections memory_new_keys "$CURVE_X"; }
body_plain() { wrk_run "body_plain_$CURVE_X" "$GATEWAY" none "$CONNECTIONS" "$CURVE_X"; record_run body plain_proxy "$CURVE_X"; }
body_memory() { wrk_run "body_memory_$CURVE_X" "$GATEWAY" unique "$CONNECTIONS" "$CURVE_X"; record_run body memory_new_keys "$CURVE_X"; }

# curve_of NAME POINTS SERIES...: every point of curve NAME in each of CURVE_ROUNDS rounds, the
# series (NAME_SERIES functions) next to each other, their order alternating from point to point
# and round to round (a fresh gateway each round, so that the keys stored stay few).
curve_of() {
  local name="$1" points="$2" round i=0
  shift 2
  local steps=("${@/#/${name}_}")
  for round in $(seq "$CURVE_ROUNDS"); do
    echo "-- $name curve, round $round of $CURVE_ROUNDS" >&2
    start_gateway "$MEMORY_STORE"
    for CURVE_X in $points; do
      i=$((i + 1))
      in_round_order "$i" "${steps[@]}"
    done
    stop_gateway
  done
}

# rss PID: the resident memory of process PID, in bytes.
rss() {
  awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status"
}

# keys_point STORE TARGET STORED BYTES: the gateway's new keys on the running gateway, with
# STORED keys in the store before its warm-up (TARGET is the curve's point), and BYTES the store's growth since it
# was empty (none when empty). Sets STORED to the keys stored after the run: keys are counted by
# the gateway's completions, not by wrk, which leaves out the requests in flight when it stops.
keys_point() {
  local store="$1" target="$2" bytes="$4" before
  STORED="$3"
  before="$(store_calls complete count)"
  # A second of new keys first, so that the point measures a gateway that has opened its
  # connections and read the store's pages in, as one that has been running has.
  DURATION=1s wrk_run "keys_${store}_${target}_warm_up" "$GATEWAY" unique "$CONNECTIONS"
  wrk_run "keys_${store}_$target" "$GATEWAY" unique "$CONNECTIONS"
  record_run keys "$store" "$target"
  record keys "$store" "$target" stored "$STORED"
  if [ "$STORED" -gt 0 ]; then
    record keys "$store" "$target" bytes_per_key "$(awk -v b="$bytes" -v k="$STORED" 'BEGIN { print b / k }')"
  fi
  STORED=$((STORED + $(store_calls complete count) - before))
}

# The memory store is in the gateway's process: filled through the gateway (64 connections, new
# keys), its size the gateway's resident memory over what it was before the first key.
keys_memory() {
  local target base
  start_gateway "$MEMORY_STORE"
  wrk_run keys_memory_warm_up "$GATEWAY" none "$CONNECTIONS"
  base="$(rss "$GATEWAY_PID")"
  STORED=0
  for target in $CURVE_KEYS; do
    # In 2 s runs, each sending what is left at most (wrk runs for its whole duration even once
    # its threads have sent their share), until the gateway has completed enough.
    while [ "$target" -gt "$STORED" ]; do
      DURATION=2s wrk_run "keys_memory_fill_$target" "$GATEWAY" unique 64 0 $((target - STORED))
      STORED="$(store_calls complete count)"
    done
    keys_point memory "$target" "$STORED" $(($(rss "$GATEWAY_PID") - base))
  done
  stop_gateway
}

# keys_filled STORE STORE_URL FILL_URL SIZE_FUNCTION: the stored-keys curve of a store that
# idem-bench-fill fills (FILL_URL: the same store, opened for filling), with the gateway
# started on it for each point (so that its connections, caches and statistics start alike).
keys_filled() {
  local store="$1" url="$2" fill_url="$3" size="$4" target filled=0 empty
  STORED=0
  empty="$("$size")"
  for target in $CURVE_KEYS; do
    if [ "$target" -gt "$filled" ]; then
      fill "$fill_url" $((target - filled)) "$filled"
      STORED=$((STORED + target - filled))
      filled="$target"
      "settle_$store" idem_keys
    fi
    start_gateway "$url"
    keys_point "$store" "$target" "$STORED" $(($("$size") - empty))
    stop_gateway_and_settle
  done
}

# SQLite: the database file, once its write-ahead log is checkpointed into it (the log is
# bounded, a few MB, and would otherwise swamp the figure of a small store).
sqlite_bytes() {
  [ -f "$WORK/keys.db" ] || { echo 0; return; }
  python3 - "$WORK/keys.db" <<'PY'
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
db.close()
print(os.path.getsize(sys.argv[1]))
PY
}
# settle_STORE SCHEMA: readies a store just filled for measuring.
settle_sqlite() { :; }

# PostgreSQL: the store's tables with their indexes and TOAST, in its schema.
postgres_bytes() {
  psql "$PG_URL" -XtAq -c "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'idem_keys' AND c.relkind = 'r'"
}
# After a fill, VACUUM ANALYZE leaves the table as autovacuum would, so that autovacuum's work
# on the new rows does not fall into the measurement.
settle_postgres() {
  psql "$PG_URL" -Xq -c "VACUUM (ANALYZE) $1.idem_records"
}

# MySQL: the store's tables (records, tokens, census board, migrations) with their indexes, as
# InnoDB's statistics give them once analyzed.
mysql_bytes() {
  "${MYSQL[@]}" -e "ANALYZE TABLE $MYSQL_DB.idem_keys" >/dev/null
  "${MYSQL[@]}" -e "SELECT coalesce(sum(data_length + index_length), 0)
    FROM information_schema.TABLES WHERE table_schema = '$MYSQL_DB' AND table_name LIKE 'idem\_keys%'"
}
# After a fill, ANALYZE TABLE refreshes InnoDB's statistics of the new rows.
settle_mysql() {
  "${MYSQL[@]}" -e "ANALYZE TABLE $MYSQL_DB.$1" >/dev/null
}
# mysql_fill_url TABLE: the store of TABLE as the filler opens it, with a connection per caller.
mysql_fill_url() {
  echo "$MYSQL_URL?ssl-mode=DISABLED&table=$1&pool_size=$FILL_CONCURRENCY"
}

# Redis: the server's used_memory (nothing else is stored on it).
redis_bytes() {
  redis_stat memory used_memory
}
settle_redis() { :; }

curve_keys() {
  local store
  # The plain proxy in the same run, for the ratios against it.
  start_gateway "$MEMORY_STORE"
  wrk_run keys_plain "$GATEWAY" none "$CONNECTIONS"
  record_run keys plain_proxy 0
  stop_gateway
  for store in $CURVE_STORES; do
    echo "-- stored keys curve: $store" >&2
    case "$store" in
      memory) keys_memory ;;
      sqlite)
        rm -f "$WORK"/keys.db*
        keys_filled sqlite "sqlite://$WORK/keys.db" "sqlite://$WORK/keys.db" sqlite_bytes
        ;;
      postgres)
        local pg
        pg="$(postgres_store idem_keys)"
        # The fill's own commits need not wait for the disk: the records are the same.
        keys_filled postgres "$pg" \
          "$PG_URL?schema=idem_keys&sslmode=disable&pool_size=$FILL_CONCURRENCY&options[synchronous_commit]=off" \
          postgres_bytes
        ;;
      mysql) keys_filled mysql "$(mysql_store idem_keys)" "$(mysql_fill_url idem_keys)" mysql_bytes ;;
      redis) keys_filled redis "$REDIS_URL?prefix=idem-keys" "$REDIS_URL?prefix=idem-keys" redis_bytes ;;
      *) echo "unknown store $store" >&2; exit 2 ;;
    esac
  done
}

# store_calls OP SERIES: the running gateway's store calls OP so far, from its metrics: their
# count (SERIES `count`) or the seconds they took (`sum`).
store_calls() {
  curl -s "$GATEWAY_ADMIN/metrics" |
    awk -v series="idem_store_duration_seconds_$2" -v op="op=\"$1\"" \
      '$1 ~ "^" series "\\{" && index($1, op) { total += $2 } END { print total + 0 }'
}

# purge_point STORE STORE_URL FILL_URL: PURGE_KEYS expired keys, purged by the gateway's own
# loop while wrk measures new keys, then the same gateway without a purge.
purge_point() {
  local store="$1" url="$2" fill_url="$3" windows=0 during=0 rps calls
  fill "$fill_url" "$PURGE_KEYS" 0 --ttl 1s
  "settle_$store" idem_purge
  sleep 2
  # The purge is done when a batch comes back short: PURGE_KEYS / 1000 full ones, then one more.
  calls=$((PURGE_KEYS / 1000 + 1))
  start_gateway "$url"
  while :; do
    DURATION=1s wrk_run "purge_${store}_$windows" "$GATEWAY" unique "$CONNECTIONS"
    rps="$(tail -1 "$WORK/results" | cut -d' ' -f2)"
    during="$(awk -v a="$during" -v b="$rps" 'BEGIN { print a + b }')"
    windows=$((windows + 1))
    [ "$(store_calls purge_expired count)" -ge "$calls" ] && break
    if [ "$windows" -ge 600 ]; then
      echo "the purge of $store did not finish in 600 windows" >&2
      break
    fi
  done
  record purge "$store" "$PURGE_KEYS" duration_s "$(store_calls purge_expired sum)"
  record purge "$store" "$PURGE_KEYS" windows "$windows"
  record purge "$store" "$PURGE_KEYS" rps_during "$(awk -v a="$during" -v n="$windows" 'BEGIN { print a / n }')"
  wrk_run "purge_${store}_without" "$GATEWAY" unique "$CONNECTIONS"
  record purge "$store" "$PURGE_KEYS" rps_without "$(tail -1 "$WORK/results" | cut -d' ' -f2)"
  stop_gateway_and_settle
}

curve_purge() {
  local store pg
  for store in $PURGE_STORES; do
    echo "-- purge: $store" >&2
    case "$store" in
      sqlite)
        rm -f "$WORK"/purge.db*
        purge_point sqlite "sqlite://$WORK/purge.db" "sqlite://$WORK/purge.db"
        ;;
      postgres)
        pg="$(postgres_store idem_purge)"
        purge_point postgres "$pg" \
          "$PG_URL?schema=idem_purge&sslmode=disable&pool_size=$FILL_CONCURRENCY&options[synchronous_commit]=off"
        ;;
      mysql) purge_point mysql "$(mysql_store idem_purge)" "$(mysql_fill_url idem_purge)" ;;
      *) echo "the purge is measured on sqlite, postgres and mysql, not $store" >&2; exit 2 ;;
    esac
  done
}

# stats_counting: whether the running gateway is counting its store's records now.
stats_counting() {
  curl -s "$GATEWAY_ADMIN/v1/stats" | python3 -c 'import json, sys; print(str(json.load(sys.stdin)["counting"]).lower())'
}

# mean_of FILE: the mean of the numbers in FILE, one per line.
mean_of() {
  awk '{ total += $1; n += 1 } END { print (n ? total / n : 0) }' "$1"
}

# census_point STORE STORE_URL FILL_URL: CENSUS_KEYS live records, counted by the gateway's
# census while wrk measures new keys in 1 s windows, each window classed by whether a census ran
# all through it; then the listing, paged through back to back.
census_point() {
  local store="$1" url="$2" fill_url="$3" windows=0 before after rps pages=0 lister
  fill "$fill_url" "$CENSUS_KEYS" 0
  "settle_$store" idem_census
  : >"$WORK/census_during"
  : >"$WORK/census_outside"
  start_gateway "$url"
  while [ "$(wc -l <"$WORK/census_during")" -lt "$CENSUS_WINDOWS" ] ||
    [ "$(wc -l <"$WORK/census_outside")" -lt "$CENSUS_WINDOWS" ]; do
    before="$(stats_counting)"
    DURATION=1s wrk_run "census_${store}_$windows" "$GATEWAY" unique "$CONNECTIONS"
    after="$(stats_counting)"
    rps="$(tail -1 "$WORK/results" | cut -d' ' -f2)"
    if [ "$before" = true ] && [ "$after" = true ]; then
      echo "$rps" >>"$WORK/census_during"
    elif [ "$before" = false ] && [ "$after" = false ]; then
      echo "$rps" >>"$WORK/census_outside"
    fi
    windows=$((windows + 1))
    # Each window adds its new keys to the store: the gap keeps the store from outgrowing the
    # census (a paced Redis census walks about 5,000 keys a second here).
    sleep "$CENSUS_GAP"
    if [ "$windows" -ge 1200 ]; then
      echo "the census of $store did not give $CENSUS_WINDOWS windows of each kind in 1200" >&2
      exit 1
    fi
  done
  record census "$store" "$CENSUS_KEYS" rps_during "$(mean_of "$WORK/census_during")"
  record census "$store" "$CENSUS_KEYS" rps_outside "$(mean_of "$WORK/census_outside")"
  record census "$store" "$CENSUS_KEYS" windows_during "$(wc -l <"$WORK/census_during")"
  record census "$store" "$CENSUS_KEYS" census_s "$(awk -v s="$(store_calls census sum)" \
    -v n="$(store_calls census count)" 'BEGIN { print (n ? s / n : 0) }')"
  # The listing: pages of 100 records, one after the other, for as long as wrk runs, from one
  # process (a program started per page would cost more than the page).
  echo 0 >"$WORK/census_pages"
  python3 - "$GATEWAY_ADMIN" "$WORK/census_pages" <<'PY' &
import json, sys, urllib.parse, urllib.request
admin, out = sys.argv[1], sys.argv[2]
cursor, pages = None, 0
while True:
    url = admin + "/v1/keys?limit=100" + ("&cursor=" + urllib.parse.quote(cursor) if cursor else "")
    try:
        with urllib.request.urlopen(url) as reply:
            cursor = json.load(reply).get("next")
    except Exception as error:  # a page refused or cut off: said, and the listing starts over
        print(f"listing: {error}", file=sys.stderr)
        cursor = None
        continue
    pages += 1
    with open(out, "w") as counted:
        counted.write(f"{pages}\n")
PY
  lister=$!
  wrk_run "census_${store}_listing" "$GATEWAY" unique "$CONNECTIONS"
  kill "$lister" 2>/dev/null || true
  wait "$lister" 2>/dev/null || true
  pages="$(cat "$WORK/census_pages")"
  record census "$store" "$CENSUS_KEYS" rps_listing "$(tail -1 "$WORK/results" | cut -d' ' -f2)"
  record census "$store" "$CENSUS_KEYS" listing_pages_per_s "$(awk -v p="$pages" -v d="${DURATION%s}" 'BEGIN { print p / d }')"
  stop_gateway_and_settle
}

curve_census() {
  local store pg
  for store in $CENSUS_STORES; do
    echo "-- census: $store" >&2
    case "$store" in
      sqlite)
        rm -f "$WORK"/census.db*
        census_point sqlite "sqlite://$WORK/census.db" "sqlite://$WORK/census.db"
        ;;
      postgres)
        pg="$(postgres_store idem_census)"
        census_point postgres "$pg" \
          "$PG_URL?schema=idem_census&sslmode=disable&pool_size=$FILL_CONCURRENCY&options[synchronous_commit]=off"
        ;;
      mysql) census_point mysql "$(mysql_store idem_census)" "$(mysql_fill_url idem_census)" ;;
      redis) census_point redis "$REDIS_URL?prefix=idem-census" "$REDIS_URL?prefix=idem-census" ;;
      *) echo "the census is measured on sqlite, postgres, mysql and redis, not $store" >&2; exit 2 ;;
    esac
  done
}

run_curves() {
  : >"$WORK/results"
  : >"$CURVES"
  # The servers, when a curve that runs measures them.
  if { in_list keys "$CURVES_RUN" && in_list postgres "$CURVE_STORES"; } ||
    { in_list purge "$CURVES_RUN" && in_list postgres "$PURGE_STORES"; } ||
    { in_list census "$CURVES_RUN" && in_list postgres "$CENSUS_STORES"; }; then
    start_postgres_database
  fi
  if { in_list keys "$CURVES_RUN" && in_list mysql "$CURVE_STORES"; } ||
    { in_list purge "$CURVES_RUN" && in_list mysql "$PURGE_STORES"; } ||
    { in_list census "$CURVES_RUN" && in_list mysql "$CENSUS_STORES"; }; then
    start_mysql_database
  fi
  if { in_list keys "$CURVES_RUN" && in_list redis "$CURVE_STORES"; } ||
    { in_list census "$CURVES_RUN" && in_list redis "$CENSUS_STORES"; }; then
    start_redis_server
  fi
  local curve
  for curve in $CURVES_RUN; do
    case "$curve" in
      connections) curve_of connections "$CURVE_CONNECTIONS" direct plain memory ;;
      body) curve_of body "$CURVE_BODIES" plain memory ;;
      keys) curve_keys ;;
      purge) curve_purge ;;
      census) curve_census ;;
      *) echo "unknown curve $curve (connections, body, keys, purge, census)" >&2; exit 2 ;;
    esac
  done
  {
    echo "Cost curves: \`$( [ "${SHORT:-0}" != 0 ] && echo 'SHORT=1 ')scripts/load curves\`," \
      "$(date -u +%Y-%m-%d), $DURATION per point, wrk with 2 threads, $CONNECTIONS connections" \
      "where the curve does not vary them."
    echo
    "$BIN/idem-bench-curves" "$CURVES" --charts "$CHARTS_DIR"
  } >"$CARGO_TARGET_DIR/load-curves.md"
  cat "$CARGO_TARGET_DIR/load-curves.md"
  python3 bench/load/results.py "$RESULTS_DIR" "$CARGO_TARGET_DIR/load-curves.md" \
    --note "$DURATION per point, wrk with 2 threads, $CONNECTIONS connections where the curve does not vary them."
}
