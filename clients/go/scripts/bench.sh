#!/usr/bin/env bash
# bench.sh — requests a second through the transport (Client.RoundTripper) as a
# ratio to the bare transport, measured in one run: a policyd (fleet memory on) and
# a fake provider without limits on 127.0.0.1, 8 workers sending chat requests,
# rounds of the two alternating. Prints both rates and `transport/bare=R`.
#
#   POLICYD_BIN, FAKEPROVIDER_BIN  built binaries; unset: bin/policyd and
#                                  bin/policyd-fakeprovider when built, else built
#                                  into a temporary directory
# Extra arguments go to the program (-workers N, -round 2s, -rounds 3).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd) # clients/go
root=$(cd "$here/../.." && pwd)
for b in policyd policyd-fakeprovider; do
	var=$([[ $b == policyd ]] && echo POLICYD_BIN || echo FAKEPROVIDER_BIN)
	if [[ -z ${!var:-} && -x $root/bin/$b ]]; then
		export "$var=$root/bin/$b"
	fi
done
cd "$here"
exec go run ./internal/transportbench "$@"
