#!/usr/bin/env bash
# chromium.sh — the headless browser of the status page's browser test.
#
#   scripts/chromium.sh   print the path of a Chromium binary, installing Debian's
#                         package "chromium" with apt-get only when none is found
#
# It looks for chromium, chromium-browser, google-chrome (on PATH) and
# /usr/bin/chromium, in that order. As a non-root user it installs with sudo.
# Messages go to stderr; only the path goes to stdout.
set -euo pipefail

say() { echo "chromium.sh: $*" >&2; }
die() {
	say "$*"
	exit 1
}

find_chromium() {
	local c
	for c in chromium chromium-browser google-chrome; do
		if command -v "$c" >/dev/null 2>&1; then
			command -v "$c"
			return
		fi
	done
	[[ -x /usr/bin/chromium ]] && echo /usr/bin/chromium && return
	return 1
}

if path=$(find_chromium); then
	echo "$path"
	exit 0
fi

command -v apt-get >/dev/null || die "Chromium is not installed and there is no apt-get: install Chromium and put it on PATH"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null || die "Chromium is not installed: run 'apt-get install chromium' as root"
	sudo=(sudo)
fi
say "Chromium not found; installing Debian's chromium with apt-get (once)"
"${sudo[@]}" apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
find_chromium || die "apt-get installed chromium, but no chromium binary was found"
