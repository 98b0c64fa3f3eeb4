#!/usr/bin/env bash
# test.sh — the Go client's whole suite, from a fresh clone: gofmt, go vet, and
# go test -race against real policyd processes and local HTTP servers.
#
#   POLICYD_BIN        absolute path of a built policyd; unset: built from the repository
#                      root into a temporary directory
#   FAKEPROVIDER_BIN   absolute path of a built policyd-fakeprovider (the transport's and
#                      the SDK tests' stand-in LLM API); unset: built likewise
#   TEST_DATABASE_URL  PostgreSQL for the journal tests; unset: a private cluster is
#                      started with scripts/pg.sh in clients/go/.run/pg-test on port
#                      GO_CLIENT_PG_PORT (default 54341) and stopped afterwards
#
# The journal tests are required here (POLICYD_REQUIRE_JOURNAL=1): without a database
# they fail instead of skipping. Extra arguments go to `go test` (e.g. -run TestJournal).
# Then the sdktest module (its own go.mod, so that the client never depends on an SDK)
# drives openai-go and anthropic-sdk-go through the transport, and last,
# scripts/install-test.sh installs the client as the README says into a fresh module
# outside the repository (both skipped when extra arguments select tests).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd) # clients/go
root=$(cd "$here/../.." && pwd)
cd "$here"

say() { echo "clients/go: $*" >&2; }
command -v go >/dev/null || { say "go is not installed (see go.mod for the version)"; exit 2; }

tmp=$(mktemp -d)
pg_dir=""
pg_port=${GO_CLIENT_PG_PORT:-54341}
cleanup() {
	if [[ -n $pg_dir ]]; then
		"$root/scripts/pg.sh" stop "$pg_dir" "$pg_port" >/dev/null 2>&1 || true
		rm -rf "$pg_dir"
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

if [[ -z ${POLICYD_BIN:-} ]]; then
	say "building policyd"
	(cd "$root" && go build -o "$tmp/policyd" ./cmd/policyd)
	POLICYD_BIN=$tmp/policyd
fi
POLICYD_BIN=$(realpath "$POLICYD_BIN")
[[ -x $POLICYD_BIN ]] || { say "POLICYD_BIN=$POLICYD_BIN is not an executable"; exit 2; }
if [[ -z ${FAKEPROVIDER_BIN:-} ]]; then
	say "building policyd-fakeprovider"
	(cd "$root" && go build -o "$tmp/policyd-fakeprovider" ./cmd/policyd-fakeprovider)
	FAKEPROVIDER_BIN=$tmp/policyd-fakeprovider
fi
FAKEPROVIDER_BIN=$(realpath "$FAKEPROVIDER_BIN")
[[ -x $FAKEPROVIDER_BIN ]] || { say "FAKEPROVIDER_BIN=$FAKEPROVIDER_BIN is not an executable"; exit 2; }

if [[ -z ${TEST_DATABASE_URL:-} ]]; then
	pg_dir=$here/.run/pg-test
	rm -rf "$pg_dir"
	say "starting a private PostgreSQL on 127.0.0.1:$pg_port"
	TEST_DATABASE_URL=$("$root/scripts/pg.sh" start "$pg_dir" "$pg_port")
fi
export POLICYD_BIN FAKEPROVIDER_BIN TEST_DATABASE_URL POLICYD_REQUIRE_JOURNAL=1

unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
	say "not gofmt-ed:"
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
go test -race -count=1 -shuffle=on "$@" ./...
if [[ $# -eq 0 ]]; then
	say "the SDK tests (sdktest)"
	(cd sdktest && go vet ./... && go test -race -count=1 -shuffle=on ./...)
	"$here/scripts/install-test.sh"
fi
