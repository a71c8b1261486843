#!/usr/bin/env bash
# The Postgres store's own limit: pgbench running exactly the store's acquire and complete
# statements (their SQL is read from `PostgresStore::sql`, parameters bound as the store binds
# them, a random new key per transaction) at the concurrency of the store's criterion bench, in a
# scratch schema dropped at the end. Then a timed purge of expired records in bounded batches.
#
#   IDEM_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
#     crates/idem-postgres/scripts/pgbench-store.sh [clients=16] [seconds=10] [purge rows=200000]
#
# Prints pgbench's report (one transaction = one new key = acquire + complete) and the purge rate.
set -euo pipefail
cd "$(dirname "$0")/../../.."

url="${IDEM_TEST_POSTGRES_URL:?set IDEM_TEST_POSTGRES_URL}"
clients="${1:-16}"
seconds="${2:-10}"
purge_rows="${3:-200000}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idem-target}"

schema="idem_pgbench_$$_$RANDOM"
script="$(mktemp --suffix=.sql)"
cleanup() {
  psql "$url" -Xq -c "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" \
    -c "DROP SCHEMA IF EXISTS \"${schema}_purge\" CASCADE" 2>/dev/null || true
  rm -f "$script"
}
trap cleanup EXIT

cargo build -q --release -p idem-postgres --example load
load="$CARGO_TARGET_DIR/release/examples/load"

"$load" script "$schema" > "$script"
echo "== pgbench: acquire + complete on new keys, $clients clients, ${seconds}s (${schema})"
pgbench -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$script" "$url"

echo "== purge: $purge_rows expired records"
for batch in 1000 10000; do
  "$load" purge "${schema}_purge" "$purge_rows" "$batch"
  psql "$url" -Xq -c "DROP SCHEMA \"${schema}_purge\" CASCADE" 2>/dev/null
done
