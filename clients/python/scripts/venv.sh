#!/usr/bin/env bash
# venv.sh — make clients/python/.venv current and print its python.
#
# Creates .venv with $PYTHON (default python3, at least 3.10) when absent, and
# installs the exact pins of requirements-dev.txt whenever that file changed
# since the last install (a stamp in .venv holds its hash). Messages go to
# stderr; only the interpreter's path goes to stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$here/.venv
lock=$here/requirements-dev.txt
stamp=$venv/.requirements-dev.sha256
pip_version=25.3

say() { echo "venv.sh: $*" >&2; }

if [[ ! -x $venv/bin/python ]]; then
	py=${PYTHON:-python3}
	if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
		say "$py is missing or older than Python 3.10; set PYTHON to a newer interpreter"
		exit 1
	fi
	say "creating $venv with $("$py" --version 2>&1)"
	rm -rf "$venv"
	"$py" -m venv "$venv"
fi

want=$(sha256sum "$lock" | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
	say "installing the pinned packages of requirements-dev.txt"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pip==$pip_version" >&2
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$lock" >&2
	echo "$want" >"$stamp"
fi
echo "$venv/bin/python"
