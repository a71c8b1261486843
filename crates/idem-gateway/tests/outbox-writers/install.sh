#!/usr/bin/env bash
# Installs what the outbox writers need, for the gateway's outbox_writers tests: psycopg and
# PyMySQL (requirements.txt, pinned) in a virtual environment of their own,
# ${IDEM_WRITERS_VENV:-$HOME/.cache/idem-outbox-writers}, created with ${PYTHON:-python3}; and
# node-postgres (package-lock.json) in node_modules/ here. Each is installed again when its list
# changes. Needs Python 3.10+ with venv, and Node.js 18+ with npm. Prints the environment's
# interpreter, for the tests' IDEM_TEST_PYTHON (scripts/test sets it so).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${IDEM_WRITERS_VENV:-$HOME/.cache/idem-outbox-writers}"
python="${PYTHON:-python3}"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# What the environment was installed from; a change reinstalls.
stamp="$venv/.idem-writers-installed"
wanted="$("$venv/bin/python" -c 'import sys; print("python:", sys.version)'; cat "$here/requirements.txt")"
if [ "$wanted" != "$(cat "$stamp" 2>/dev/null)" ]; then
  echo "install.sh: installing the outbox writers' Python drivers into $venv" >&2
  rm -f "$stamp"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$here/requirements.txt" >&2
  printf '%s' "$wanted" >"$stamp"
fi

cd "$here"
stamp=node_modules/.idem-package-lock.json
if ! cmp -s package-lock.json "$stamp"; then
  echo "install.sh: installing the outbox writers' Node.js packages" >&2
  npm ci --no-audit --no-fund --silent >&2
  cp package-lock.json "$stamp"
fi

echo "$venv/bin/python"
