#!/usr/bin/env bash
# bench.sh — what the transport costs: requests a second through it (policyd_client's
# httpx2 transport, its fleet gate on, against a policyd with fleet memory) and through the
# bare httpx2 transport, to the same local fake provider without limits, in one run,
# alternating rounds. Prints `transport/bare=R (transport T req/s, bare B req/s)` and the
# client's CPU for each request.
#
# Assumes bin/policyd and bin/policyd-fakeprovider are built (make build), or POLICYD_BIN and
# FAKEPROVIDER_BIN. Extra arguments go to scripts/bench.py (--rounds, --requests).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
py=$(scripts/venv.sh)
"$py" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
exec "$py" scripts/bench.py "$@"
