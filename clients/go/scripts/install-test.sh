#!/usr/bin/env bash
# install-test.sh — installs the Go client the way its README says, into a
# fresh module outside the repository, and runs it: `go mod init`, a
# `replace` directive pointing at this clone's clients/go, `go mod tidy`,
# `go build`. The program dials a closed port and makes one call that fails
# once: the client decides with its fail-open policy and the call succeeds,
# so the install is proven without a daemon.
#
#   INSTALL_TEST_KEEP=1  keep the temporary module (its path is printed)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd) # clients/go
say() { echo "clients/go install-test: $*" >&2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/policyd-go-install.XXXXXX")
if [[ -z ${INSTALL_TEST_KEEP:-} ]]; then
	trap 'rm -rf "$tmp"' EXIT
else
	say "keeping $tmp"
fi
case $tmp in "$here"/* | "$(cd "$here/../.." && pwd)"/*)
	say "the temporary module must be outside the repository: $tmp"
	exit 2
	;;
esac

cd "$tmp"
export GOWORK=off GOFLAGS=-mod=mod # nothing from the repository's own set-up
go mod init example.com/agent >/dev/null 2>&1
# The route the README gives for a clone.
go mod edit -require=github.com/policyd/policyd/clients/go@v0.0.0 \
	-replace=github.com/policyd/policyd/clients/go="$here"
cat >main.go <<'GO'
// Command agent makes one call through the policyd client: it fails once
// with a 503, and succeeds on the retry the client decides.
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	policyd "github.com/policyd/policyd/clients/go"
)

func main() {
	client, err := policyd.Dial(os.Args[1], policyd.WithFleetGate(false), policyd.WithDaemonTimeout(200*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	call := policyd.Call{Provider: "openai", Model: "gpt-4o-mini", Operation: "chat"}
	answer, err := policyd.Do(context.Background(), client, call, func(ctx context.Context, attempt int) (string, error) {
		if attempt == 1 {
			return "", policyd.NewHTTPError(&http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{}, Body: http.NoBody})
		}
		return fmt.Sprintf("answered on attempt %d", attempt), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(answer)
}
GO
say "go mod tidy in $tmp (replace → $here)"
go mod tidy
go build -o agent .
if go list -m all | grep -q '^github.com/policyd/policyd '; then
	say "the module pulled in the server's module"
	exit 1
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' 2>/dev/null || echo 1)
out=$(./agent "127.0.0.1:$port" 2>/dev/null)
if [[ $out != "answered on attempt 2" ]]; then
	say "the installed client printed $(printf %q "$out"), want \"answered on attempt 2\""
	exit 1
fi
say "ok: a fresh module outside the repository builds and runs the client"
