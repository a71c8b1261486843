#!/usr/bin/env bash
# Builds @idem/client and runs its tests: installs the pinned dev dependencies when
# node_modules is missing or package-lock.json changed, compiles the package (dist/) and the
# tests with the end-to-end driver (build/), then runs the tests with Node's test runner.
# Needs Node 18+ and npm. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"

lock_hash() {
  node -e 'const c=require("node:crypto"),f=require("node:fs");process.stdout.write(c.createHash("sha256").update(f.readFileSync("package-lock.json")).digest("hex"))'
}

stamp=node_modules/.idem-package-lock.sha256
want=$(lock_hash)
if [ ! -d node_modules ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  npm ci --no-audit --no-fund
  printf '%s' "$want" > "$stamp"
fi

rm -rf dist build
# The package: dist/, ESM with its type declarations.
npx tsc -p .
# The tests and the end-to-end driver, type-checked and compiled to build/.
npx tsc -p tsconfig.test.json

node --test build/test/*.test.js
