#!/usr/bin/env bash
# test.sh — the Python client's whole suite, from a fresh clone.
#
# Creates or updates .venv from requirements-dev.txt (exact pins), installs the
# package into it (editable), runs ruff (lint and format check), mypy --strict on the package and the pytest
# suite (which also runs the README's examples) against a real policyd and a real
# PostgreSQL journal:
#   POLICYD_BIN        a built policyd; unset: built from the repo root with go build
#   TEST_DATABASE_URL  a postgres:// URL; unset: a private cluster (scripts/pg.sh) in
#                      .run/pg-python on PYTHON_PG_PORT (default 5442), stopped afterwards
#                      unless it was already running
# Extra arguments go to pytest (e.g. -k journal -x).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$here"

cleanup=()
trap 'for c in "${cleanup[@]}"; do eval "$c" || true; done' EXIT

py=$(scripts/venv.sh)
"$py" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .

if [[ -z ${POLICYD_BIN:-} ]]; then
	bin=$(mktemp -d)
	cleanup+=("rm -rf '$bin'")
	echo "test.sh: building policyd" >&2
	(cd "$repo" && go build -o "$bin/policyd" ./cmd/policyd)
	export POLICYD_BIN=$bin/policyd
fi

if [[ -z ${TEST_DATABASE_URL:-} ]]; then
	pg_dir=$repo/.run/pg-python
	pg_port=${PYTHON_PG_PORT:-5442}
	if ! "$repo/scripts/pg.sh" status "$pg_dir" "$pg_port" >/dev/null 2>&1; then
		cleanup+=("'$repo/scripts/pg.sh' stop '$pg_dir' '$pg_port' >/dev/null 2>&1")
	fi
	TEST_DATABASE_URL=$("$repo/scripts/pg.sh" start "$pg_dir" "$pg_port")
	export TEST_DATABASE_URL
fi
export POLICYD_REQUIRE_JOURNAL=1 # the journal tests fail rather than skip without a database

echo "test.sh: ruff check, ruff format --check" >&2
"$py" -m ruff check src tests
"$py" -m ruff format --check src tests
echo "test.sh: mypy --strict" >&2
"$py" -m mypy
echo "test.sh: pytest" >&2
"$py" -m pytest -q -p no:cacheprovider "$@"
