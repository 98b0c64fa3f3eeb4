#!/usr/bin/env bash
# The TypeScript client's whole suite, from a fresh clone: install the
# pinned npm packages (npm ci), build dist/, type-check the sources and the
# tests (strict), lint them (eslint.config.js) and check their layout
# (prettier; `npm run format` fixes it), and run the tests (node:test)
# against real policyd processes and real HTTP servers on 127.0.0.1, README
# examples included. Last, scripts/install-test.sh packs the client (npm
# pack) and installs the tarball into a fresh project outside the
# repository, as the README says.
#
# Env: POLICYD_BIN, an absolute path to a built policyd (unset: built here
# from the repository root); TEST_DATABASE_URL, a PostgreSQL URL for the
# journal tests (unset: a private cluster is started with scripts/pg.sh and
# stopped afterwards).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"

tmp="$(mktemp -d /tmp/policyd-ts-test.XXXXXX)"
pgdir=""
cleanup() {
  if [[ -n "$pgdir" ]]; then
    "$root/scripts/pg.sh" stop "$pgdir" "$pgport" >/dev/null 2>&1 || true
    rm -rf "$pgdir"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

npm ci --no-audit --no-fund --loglevel=error
npm run --silent build      # dist/, type-checked strictly
npm run --silent typecheck  # sources and tests, strict, no output (the tests import dist/)
npm run --silent lint       # eslint's and typescript-eslint's recommended rules, prettier --check
npm run --silent build:test # build/test/

if [[ -z "${POLICYD_BIN:-}" ]]; then
  echo "test.sh: building policyd into $tmp" >&2
  (cd "$root" && go build -o "$tmp/policyd" ./cmd/policyd)
  export POLICYD_BIN="$tmp/policyd"
fi

if [[ -z "${TEST_DATABASE_URL:-}" ]]; then
  pgdir="$(mktemp -d /tmp/policyd-ts-pg.XXXXXX)"
  pgport="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
  TEST_DATABASE_URL="$("$root/scripts/pg.sh" start "$pgdir" "$pgport")"
  export TEST_DATABASE_URL
fi
# The journal tests must run here, not skip.
export POLICYD_REQUIRE_JOURNAL=1

node --test build/test/*.test.js

# The README's install route, in a fresh project outside the repository.
INSTALL_TEST_NO_BUILD=1 scripts/install-test.sh
