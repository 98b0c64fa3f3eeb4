#!/usr/bin/env bash
# clients-test.sh — every client's suite (clients/<lang>/scripts/test.sh) against bin/policyd,
# the three at once: most of their time is spent waiting on real processes (a daemon killed
# for 40 s, deadlines, reconnects), not on the CPU. Each suite gets a database of its own on
# the server of TEST_DATABASE_URL (scripts/pg.sh database), so that their daemons share no
# journal and no fleet memory. A suite's output is printed whole when it ends; the script
# fails when any suite fails.
#
#   TEST_DATABASE_URL  the PostgreSQL `make test` started (or yours); unset: a private cluster in
#                      .run/pg-clients on CLIENTS_PG_PORT (default 54339), stopped afterwards
#   CLIENTS            the suites to run (default: go python typescript)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
clients=${CLIENTS:-go python typescript}
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

declare -A pid
for c in $clients; do
	url=$(scripts/pg.sh database "$TEST_DATABASE_URL" "policyd_client_$c")
	echo "== clients/$c: started"
	TEST_DATABASE_URL=$url POLICYD_BIN=$root/bin/policyd FAKEPROVIDER_BIN=$root/bin/policyd-fakeprovider \
		"clients/$c/scripts/test.sh" >"$logs/$c" 2>&1 &
	pid[$c]=$!
done

failed=()
for c in $clients; do
	rc=0
	wait "${pid[$c]}" || rc=$?
	echo "== clients/$c (exit $rc)"
	cat "$logs/$c"
	((rc == 0)) || failed+=("$c")
done
if ((${#failed[@]})); then
	echo "clients-test.sh: failed: ${failed[*]}" >&2
	exit 1
fi
echo "clients-test.sh: every suite passed: $clients"
