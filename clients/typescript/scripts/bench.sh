#!/usr/bin/env bash
# The fetch transport's benchmark (test/bench.ts): requests a second through
# client.fetch against the bare global fetch, in alternating rounds of one
# run, against the fake provider without limits and a policyd with fleet
# memory on. Prints one line: transport/bare=R (transport N req/s, bare M req/s; ...).
#
# Env: POLICYD_BIN and FAKEPROVIDER_BIN (default the repository's bin/,
# built by `make build`); BENCH_ROUNDS, BENCH_SECONDS, BENCH_CONCURRENCY.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"

export POLICYD_BIN="${POLICYD_BIN:-$root/bin/policyd}"
export FAKEPROVIDER_BIN="${FAKEPROVIDER_BIN:-$root/bin/policyd-fakeprovider}"
for bin in "$POLICYD_BIN" "$FAKEPROVIDER_BIN"; do
  [[ -x "$bin" ]] || { echo "bench.sh: $bin is not built (make build)" >&2; exit 2; }
done

[[ -d node_modules ]] || npm ci --no-audit --no-fund --loglevel=error
npm run --silent build
npm run --silent build:test
node build/test/bench.js
