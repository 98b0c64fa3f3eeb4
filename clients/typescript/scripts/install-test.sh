#!/usr/bin/env bash
# install-test.sh — installs the TypeScript client the way its README says,
# into a fresh npm project outside the repository, and runs it: `npm pack`
# here (after `npm run build`), then `npm install` of the tarball there. The
# script there makes one call that fails once while policyd is unreachable:
# the client decides with its fail-open policy and the call succeeds, so the
# install is proven without a daemon. The installed package must be a copy,
# not a link into this clone, and @opentelemetry/api (an optional peer
# dependency) must not come with it: the script runs without it.
#
# Env: INSTALL_TEST_KEEP=1 keeps the temporary project (its path is printed);
# INSTALL_TEST_NO_BUILD=1 packs dist/ as it is (scripts/test.sh has just
# built it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" # clients/typescript
root="$(cd "$here/../.." && pwd)"
say() { echo "clients/typescript install-test: $*" >&2; }

tmp="$(mktemp -d "${TMPDIR:-/tmp}/policyd-ts-install.XXXXXX")"
if [[ -z "${INSTALL_TEST_KEEP:-}" ]]; then
  trap 'rm -rf "$tmp"' EXIT
else
  say "keeping $tmp"
fi
case "$tmp" in "$root"/*)
  say "the temporary project must be outside the repository: $tmp"
  exit 2
  ;;
esac

cd "$here"
if [[ -z "${INSTALL_TEST_NO_BUILD:-}" ]]; then
  [[ -d node_modules ]] || npm ci --no-audit --no-fund --loglevel=error
  npm run --silent build
fi
tarball="$(npm pack --silent --pack-destination "$tmp" | tail -n 1)"
say "packed $tarball"

mkdir "$tmp/agent"
cd "$tmp/agent"
npm init -y >/dev/null
npm pkg set type=module >/dev/null
npm install --no-audit --no-fund --loglevel=error "$tmp/$tarball"
if [[ -L node_modules/@policyd/client ]]; then
  say "node_modules/@policyd/client is a link, not an installed copy"
  exit 1
fi
if [[ -e node_modules/@opentelemetry/api ]]; then
  say "npm installed @opentelemetry/api, an optional peer dependency: the client must run without it"
  exit 1
fi
cat >agent.js <<'JS'
// One call through the policyd client: it fails once with a 503 and
// succeeds on the retry the client decides (policyd is not running).
import { createClient, HttpError } from "@policyd/client";

const client = createClient({ address: process.argv[2], fleetGate: false, daemonTimeoutMs: 200 });
const answer = await client.call(
  async ({ attempt }) => {
    if (attempt === 1) throw new HttpError({ status: 503 });
    return `answered on attempt ${attempt}`;
  },
  { provider: "openai", model: "gpt-4o-mini", operation: "chat" },
);
await client.close();
console.log(answer);
JS
port="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
out="$(node agent.js "127.0.0.1:$port" 2>/dev/null)"
if [[ "$out" != "answered on attempt 2" ]]; then
  say "the installed client printed $(printf %q "$out"), want \"answered on attempt 2\""
  exit 1
fi
say "ok: a fresh project outside the repository installs the packed client and runs it"
