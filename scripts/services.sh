# Sourced by scripts/test: makes sure every server the tests use is running on loopback, starting
# (and, on a machine without it, installing with apt-get) each one that is not, and exports the
# IDEM_TEST_* URLs the store and broker tests read. Any failure to start is fatal: CI never skips.

listening() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_for() { # NAME PORT
  for _ in $(seq 150); do
    listening "$2" && return 0
    sleep 0.2
  done
  echo "error: $1 did not start listening on 127.0.0.1:$2" >&2
  return 1
}

apt_install() {
  echo "installing $* with apt-get" >&2
  if [ -z "${IDEM_APT_UPDATED:-}" ]; then
    apt-get update -qq >/dev/null
    IDEM_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Python 3 with venv, and Node.js with npm: the clients' tests and the outbox writers' need them.
ensure_python_and_node() {
  command -v python3 >/dev/null || apt_install python3
  python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
  command -v node >/dev/null || apt_install nodejs
  command -v npm >/dev/null || apt_install npm
}

ensure_postgres() {
  if ! listening 5432; then
    ls /etc/postgresql/*/main >/dev/null 2>&1 || apt_install postgresql
    local version
    version="$(ls /etc/postgresql | sort -V | tail -1)"
    local hba="/etc/postgresql/$version/main/pg_hba.conf"
    # Tests connect over TCP as postgres without a password: trust loopback (a test machine).
    if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
      sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    fi
    # The package may have started the cluster itself; then it only needs to reread pg_hba.conf.
    if listening 5432; then
      pg_ctlcluster --skip-systemctl-redirect "$version" main reload
    else
      pg_ctlcluster --skip-systemctl-redirect "$version" main start
    fi
    wait_for PostgreSQL 5432
  fi
  local psql=(psql -h 127.0.0.1 -U postgres -d postgres -tAq)
  for _ in $(seq 50); do "${psql[@]}" -c 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
  if [ "$("${psql[@]}" -c "select 1 from pg_database where datname = 'test'")" != 1 ]; then
    "${psql[@]}" -c 'create database test'
  fi
  # Plain text: the cluster offers TLS, whose handshake on each new connection (sslmode=prefer)
  # takes about 100 ms here, enough to upset the suites that measure leases against the server's
  # clock. The TLS tests start PostgreSQL servers of their own.
  export IDEM_TEST_POSTGRES_URL="${IDEM_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
}

ensure_mysql() {
  if ! listening 3306; then
    command -v mariadbd >/dev/null || command -v mysqld >/dev/null || apt_install mariadb-server
    # The package may have started the server itself.
    if ! listening 3306; then
      if [ -x /etc/init.d/mariadb ]; then
        /etc/init.d/mariadb start >/dev/null
      else
        (mysqld_safe --user=mysql >/dev/null 2>&1 &)
      fi
    fi
    wait_for MariaDB 3306
  fi
  local mysql=(mariadb -h 127.0.0.1 -P 3306 -u root)
  command -v mariadb >/dev/null || mysql=(mysql -h 127.0.0.1 -P 3306 -u root)
  # Tests connect over TCP as root without a password (a test machine). Debian's package lets
  # root in through the Unix socket only: root@127.0.0.1 gets an empty password there.
  for _ in $(seq 50); do "${mysql[@]}" -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
  if ! "${mysql[@]}" -e 'select 1' >/dev/null 2>&1; then
    "${mysql[0]}" -u root -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
      GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
  fi
  "${mysql[@]}" -e 'CREATE DATABASE IF NOT EXISTS test'
  export IDEM_TEST_MYSQL_URL="${IDEM_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}"
}

ensure_redis() {
  command -v redis-server >/dev/null || apt_install redis-server
  if ! listening 6379; then
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no
    wait_for Redis 6379
  fi
  export IDEM_TEST_REDIS_URL="${IDEM_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
}

ensure_rabbitmq() {
  if ! listening 5672; then
    command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
    # The package may have started the broker itself.
    listening 5672 || rabbitmq-server -detached
    wait_for RabbitMQ 5672
  fi
  export IDEM_TEST_AMQP_URL="${IDEM_TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"
}

ensure_nats() {
  if ! listening 4222; then
    command -v nats-server >/dev/null || apt_install nats-server
    local store="${TMPDIR:-/tmp}/idem-nats"
    mkdir -p "$store"
    # JetStream on (-js), its streams under $store; the server outlives this script, like Redis.
    nohup nats-server -a 127.0.0.1 -p 4222 -js -sd "$store" -l "$store/nats-server.log" \
      >/dev/null 2>&1 &
    disown
    wait_for NATS 4222
  fi
  export IDEM_TEST_NATS_URL="${IDEM_TEST_NATS_URL:-nats://127.0.0.1:4222}"
}

# The `kafka` feature builds librdkafka from source (rdkafka-sys runs its ./configure and make),
# with TLS and SASL linked to Debian's OpenSSL (rdkafka's `ssl` feature: openssl-sys finds it
# with pkg-config).
ensure_kafka_build_tools() {
  local missing=()
  command -v cc >/dev/null || missing+=(gcc)
  command -v make >/dev/null || missing+=(make)
  command -v perl >/dev/null || missing+=(perl)
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  [ -f /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
  if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
  fi
}

# The Kafka tests' broker: tansu, a Kafka-protocol broker written in Rust that builds from
# crates.io (no JVM, no Debian package), built once into $IDEM_TOOLS (the CI cache) from
# scripts/tansu, whose Cargo.lock has no yanked crate (tansu's published one has), and run with its
# in-memory storage. Its log goes to $TMPDIR/idem-tansu.log; it outlives this script.
# IDEM_TANSU names the binary, for the tests that start a broker of their own. The Kafka TLS tests
# put stunnel (Debian's stunnel4) in front of a tansu of their own.
ensure_kafka() {
  command -v stunnel4 >/dev/null || command -v stunnel >/dev/null || apt_install stunnel4
  local tools="${IDEM_TOOLS:-$HOME/.cache/idem-tools}"
  local recipe built sources
  recipe="$(dirname "${BASH_SOURCE[0]}")/tansu"
  sources=("$recipe/Cargo.toml" "$recipe/Cargo.lock" "$recipe/main.rs")
  # Built again whenever scripts/tansu changes (its copy beside the binary says what was built).
  built="$tools/idem-tansu.built"
  if [ ! -x "$tools/bin/tansu" ] || ! cat "${sources[@]}" | cmp -s - "$built"; then
    echo "building tansu with cargo into $tools (once: it takes about 8 minutes)" >&2
    # In a directory of its own, removed after, as `cargo install` does for a registry crate;
    # --force: it replaces a `tansu` installed before, from tansu's own lock or an older one.
    local target
    target="$(mktemp -d)"
    CARGO_INSTALL_ROOT="$tools" cargo install --locked --force --path "$recipe" \
      --target-dir "$target"
    rm -rf "$target"
    cat "${sources[@]}" >"$built"
  fi
  if ! listening 9092; then
    local log="${TMPDIR:-/tmp}/idem-tansu.log"
    nohup "$tools/bin/tansu" broker \
      --listener-url tcp://127.0.0.1:9092 \
      --advertised-listener-url tcp://127.0.0.1:9092 \
      --storage-engine memory://tansu/ >"$log" 2>&1 &
    disown
    wait_for tansu 9092 || { tail -20 "$log" >&2; return 1; }
  fi
  export IDEM_TEST_KAFKA_URL="${IDEM_TEST_KAFKA_URL:-127.0.0.1:9092}"
  # The Kafka fault test runs a tansu of its own.
  if [ -x "$tools/bin/tansu" ]; then
    export IDEM_TANSU="${IDEM_TANSU:-$tools/bin/tansu}"
  fi
}

# Amazon SQS: moto's server (from PyPI, `moto[server]`) speaks the SQS API on loopback, in memory.
# Installed with pip into a virtual environment of its own; started in the background, outliving
# this script like Redis.
ensure_sqs() {
  local port=9324
  if ! listening "$port"; then
    local venv="${IDEM_SQS_VENV:-$HOME/.cache/idem-moto}"
    if [ ! -x "$venv/bin/moto_server" ]; then
      command -v python3 >/dev/null || apt_install python3
      python3 -m venv "$venv" 2>/dev/null || { apt_install python3-venv && python3 -m venv "$venv"; }
      echo "installing moto[server] with pip" >&2
      "$venv/bin/pip" install -q 'moto[server]>=5,<6' >/dev/null
    fi
    nohup "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"${TMPDIR:-/tmp}/idem-moto.log" 2>&1 &
    disown
    wait_for SQS "$port"
  fi
  export IDEM_TEST_SQS_URL="${IDEM_TEST_SQS_URL:-http://127.0.0.1:$port}"
}
