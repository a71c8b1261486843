# `scripts/load peers`: idem against the other idempotency gateway and the other idempotency
# tower layer, in ROUNDS rounds, each ratio within a round. Sourced by scripts/load, whose
# helpers it uses (and bench/load/targets.bash's `measure`).
#
#   scripts/load peers                          # 10 s per configuration, 5 rounds
#   DURATION=5s ROUNDS=3 scripts/load peers
#
# Gateway against gateway, both on one redis-server of the harness's own, in front of the same
# upstream, at CONNECTIONS wrk connections:
#
# - `idem serve --store redis://…` with the Redis store's defaults (records kept a day);
# - idempotent-proxy-server 1.2.2 (crates.io), installed with `cargo install --locked` into
#   $IDEM_TOOLS/idempotent-proxy-server when missing. It reaches the upstream through a
#   `URL_UPSTREAM` variable (requests to /URL_UPSTREAM), keeps its records in Redis for
#   REQUEST_TIMEOUT, its upstream timeout, which is set to a day (the default, 10 s, would
#   expire the replayed key within a measurement), and logs at warn, as the gateway does.
#
# Layer against layer, in process (bench/peers, a workspace of its own built here with
# `cargo build --release --ignore-rust-version`): idem-http's layer on idem-core's memory store
# against the `idempotent` crate's (2.0) on its own memory store, around the same handler (the
# upstream's answer), CONNECTIONS tasks on a runtime with a worker per core; idem-http also with
# raw fingerprints (the body hashed as sent, as idempotent hashes it; the default canonicalizes
# JSON), and the handler alone. One process per measurement, so that each starts on an empty
# store.
#
# Each round measures new keys and replays on every one of them, in the reverse order in even
# rounds (ABBA). The report (bench/load/peers_report.py) gives the configurations' medians, the
# gateways' CPU per request and each ratio against its target; its three tables go to
# RESULTS_DIR as peers-gateways.json, peers-layers.json and peers-ratios.json.

# The peer gateway's version: the one the figures are for.
PEER_GATEWAY_VERSION=1.2.2

run_peers() {
  # shellcheck source=bench/load/targets.bash
  source bench/load/targets.bash
  : >"$WORK/results"
  : >"$WORK/cpu"
  install_peer_gateway
  echo "building bench/peers (release)" >&2
  cargo build --release --locked -q --ignore-rust-version --manifest-path bench/peers/Cargo.toml
  LAYERS="$CARGO_TARGET_DIR/release/idem-peers-layers"

  start_redis_server
  start_gateway "$REDIS_URL?prefix=idem-peers"
  REDIS_GATEWAY="$GATEWAY" REDIS_GATEWAY_PID="$GATEWAY_PID"
  seed_replay_key
  start_peer_gateway

  local steps=(idem_new_keys peer_new_keys idem_replays peer_replays layer_none layer_idem_new_keys
    layer_idempotent_new_keys layer_idem_raw_new_keys layer_idem_replays layer_idempotent_replays
    layer_idem_raw_replays)
  local round
  for round in $(seq "$ROUNDS"); do
    echo "-- round $round of $ROUNDS" >&2
    in_round_order "$round" "${steps[@]}"
  done

  python3 bench/load/peers_report.py "$WORK/results" "$WORK/cpu" "$DURATION" "$CONNECTIONS" \
    "$(getconf CLK_TCK)" "$RESULTS_DIR" >"$REPORT"
  cat "$REPORT"
}

# install_peer_gateway: idempotent-proxy-server $PEER_GATEWAY_VERSION from crates.io, built once
# (a few minutes) into a directory of its own under IDEM_TOOLS, as scripts/services.sh builds
# tansu. Sets PEER_GATEWAY_BIN.
install_peer_gateway() {
  local root="${IDEM_TOOLS:-$HOME/.cache/idem-tools}/idempotent-proxy-server"
  PEER_GATEWAY_BIN="$root/bin/idempotent-proxy-server"
  if [ -x "$PEER_GATEWAY_BIN" ] &&
    cargo install --list --root "$root" | grep -qx "idempotent-proxy-server v$PEER_GATEWAY_VERSION:"; then
    return
  fi
  echo "installing idempotent-proxy-server $PEER_GATEWAY_VERSION with cargo into $root" >&2
  local target
  target="$(mktemp -d)"
  cargo install --locked --force --version "$PEER_GATEWAY_VERSION" --root "$root" \
    --target-dir "$target" idempotent-proxy-server
  rm -rf "$target"
}

# start_peer_gateway: idempotent-proxy-server on the harness's redis-server, forwarding to the
# upstream, with the key that replays executed. It reads its settings from the environment and
# insists on a .env file in its working directory (an empty one here). Sets PEER_GATEWAY (the URL
# wrk sends to) and PEER_GATEWAY_PID.
start_peer_gateway() {
  local port
  port="$(free_port)"
  mkdir -p "$WORK/peer"
  : >"$WORK/peer/.env"
  (
    cd "$WORK/peer" &&
      exec env SERVER_ADDR="127.0.0.1:$port" REDIS_URL="$REDIS_URL" URL_UPSTREAM="$UPSTREAM/" \
        REQUEST_TIMEOUT=86400000 LOG_LEVEL=warn "$PEER_GATEWAY_BIN" >/dev/null
  ) &
  PEER_GATEWAY_PID=$!
  PIDS+=("$PEER_GATEWAY_PID")
  wait_port "$port"
  PEER_GATEWAY="http://127.0.0.1:$port/URL_UPSTREAM"
  # The request that `payment.lua -- same` then replays (seed_replay_key's, at this path).
  curl -s -o /dev/null -X POST -H 'Idempotency-Key: bench-replay-key' \
    -H 'Content-Type: application/json' \
    --data '{"amount":1000,"currency":"eur","source":"tok_visa"}' "$PEER_GATEWAY" || true
}

# layer NAME LAYER KEYS: one in-process measurement, appended to $WORK/results as wrk_run's are.
layer() {
  echo "-- $1 (in process, $CONNECTIONS tasks, $DURATION)" >&2
  echo "$1 $("$LAYERS" "$2" "$3" "$DURATION" "$CONNECTIONS")" >>"$WORK/results"
}

# The steps of a round.
idem_new_keys() {
  measure idem_new_keys "$REDIS_GATEWAY" unique "$CONNECTIONS" "$REDIS_GATEWAY_PID" redis_pids
}
peer_new_keys() {
  measure peer_new_keys "$PEER_GATEWAY" unique "$CONNECTIONS" "$PEER_GATEWAY_PID" redis_pids
}
idem_replays() {
  measure idem_replays "$REDIS_GATEWAY" same "$CONNECTIONS" "$REDIS_GATEWAY_PID" redis_pids
}
peer_replays() {
  measure peer_replays "$PEER_GATEWAY" same "$CONNECTIONS" "$PEER_GATEWAY_PID" redis_pids
}
layer_none() { layer layer_none none unique; }
layer_idem_new_keys() { layer layer_idem_new_keys idem unique; }
layer_idempotent_new_keys() { layer layer_idempotent_new_keys idempotent unique; }
layer_idem_raw_new_keys() { layer layer_idem_raw_new_keys idem-raw unique; }
layer_idem_replays() { layer layer_idem_replays idem same; }
layer_idem_raw_replays() { layer layer_idem_raw_replays idem-raw same; }
layer_idempotent_replays() { layer layer_idempotent_replays idempotent same; }
