#!/usr/bin/env bash
# Type-checks and tests the Python client of idem in a virtual environment of its own:
# ${IDEM_PYTHON_VENV:-$HOME/.cache/idem-python-client}, created with ${PYTHON:-python3} and reused
# while requirements-dev.txt and pyproject.toml are unchanged. Extra arguments go to pytest.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${IDEM_PYTHON_VENV:-$HOME/.cache/idem-python-client}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    echo "test.sh: creating the virtual environment $venv" >&2
    "$python" -m venv "$venv"
fi

# What the environment was installed from; a change reinstalls.
stamp="$venv/.idem-client-installed"
wanted="$(mktemp)"
trap 'rm -f "$wanted"' EXIT
{
    echo "source: $here"
    "$venv/bin/python" -c 'import sys; print("python:", sys.version)'
    cat "$here/requirements-dev.txt" "$here/pyproject.toml"
} >"$wanted"

if ! cmp -s "$wanted" "$stamp"; then
    echo "test.sh: installing requirements-dev.txt and idem-client (editable)" >&2
    rm -f "$stamp"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r "$here/requirements-dev.txt"
    "$venv/bin/python" -m pip install --quiet -e "$here"
    cp "$wanted" "$stamp"
fi

cd "$here"
echo "test.sh: mypy --strict" >&2
"$venv/bin/python" -m mypy --strict src/idem_client tests e2e_payments.py
echo "test.sh: pytest" >&2
"$venv/bin/python" -m pytest -q "$@"
