#!/usr/bin/env bash
# Regenerates src/gen from the repository's proto/ with buf and the
# protoc-gen-es pinned in package-lock.json. Deterministic: running it twice
# gives the same files. On a fresh machine it installs what it needs: the
# npm packages (npm ci) and buf (go install, into <repo>/.bin).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
BUF_VERSION=v1.75.0

cd "$here"
if [[ ! -x node_modules/.bin/protoc-gen-es ]]; then
  npm ci --no-audit --no-fund
fi

buf=""
if [[ -x "$root/.bin/buf" ]]; then
  buf="$root/.bin/buf"
elif command -v buf >/dev/null 2>&1; then
  buf="$(command -v buf)"
else
  echo "generate.sh: installing buf $BUF_VERSION into $root/.bin" >&2
  GOBIN="$root/.bin" go install "github.com/bufbuild/buf/cmd/buf@$BUF_VERSION"
  buf="$root/.bin/buf"
fi

"$buf" generate --template buf.gen.yaml
