#!/usr/bin/env bash
# clients-test.sh — every client's suite (clients/<lang>/scripts/test.sh) against bin/policyd.
# The Go suite runs first, alone: it runs with the race detector and its timing tests (a
# daemon timeout told from two) need the CPU. The Python and TypeScript suites then run side
# by side: most of their time is spent waiting on real processes (a daemon killed for 40 s,
# deadlines, reconnects), not on the CPU. Each suite gets a database of its own on the server
# of TEST_DATABASE_URL (scripts/pg.sh database), so that their daemons share no journal and no
# fleet memory. A suite's output is printed whole when it ends; the script fails when any
# suite fails.
#
#   TEST_DATABASE_URL  the PostgreSQL `make test` started (or yours); unset: a private cluster in
#                      .run/pg-clients on CLIENTS_PG_PORT (default 54339), stopped afterwards
#   CLIENTS_ALONE      the suites run one after another, first (default: go)
#   CLIENTS_TOGETHER   the suites run side by side, after them (default: python typescript)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
alone=${CLIENTS_ALONE-go}
together=${CLIENTS_TOGETHER-python typescript}
logs=$(mktemp -d)
pg_dir=""
pg_port=${CLIENTS_PG_PORT:-54339}
cleanup() {
	[[ -z $pg_dir ]] || { scripts/pg.sh stop "$pg_dir" "$pg_port" >/dev/null 2>&1 || true; rm -rf "$pg_dir"; }
	rm -rf "$logs"
}
trap cleanup EXIT
if [[ -z ${TEST_DATABASE_URL:-} ]]; then
	pg_dir=$root/.run/pg-clients
	rm -rf "$pg_dir"
	TEST_DATABASE_URL=$(scripts/pg.sh start "$pg_dir" "$pg_port")
fi

# start C runs clients/C's suite in the background, its output in $logs/C.
declare -A pid
start() {
	local url
	url=$(scripts/pg.sh database "$TEST_DATABASE_URL" "policyd_client_$1")
	echo "== clients/$1: started"
	TEST_DATABASE_URL=$url POLICYD_BIN=$root/bin/policyd FAKEPROVIDER_BIN=$root/bin/policyd-fakeprovider \
		"clients/$1/scripts/test.sh" >"$logs/$1" 2>&1 &
	pid[$1]=$!
}

# finish C waits for clients/C's suite and prints its output.
failed=()
finish() {
	local rc=0
	wait "${pid[$1]}" || rc=$?
	echo "== clients/$1 (exit $rc)"
	cat "$logs/$1"
	((rc == 0)) || failed+=("$1")
}

for c in $alone; do
	start "$c"
	finish "$c"
done
for c in $together; do
	start "$c"
done
for c in $together; do
	finish "$c"
done
if ((${#failed[@]})); then
	echo "clients-test.sh: failed: ${failed[*]}" >&2
	exit 1
fi
echo "clients-test.sh: every suite passed: $alone $together"
