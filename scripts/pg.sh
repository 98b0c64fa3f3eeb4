#!/usr/bin/env bash
# pg.sh — a private PostgreSQL cluster for `make run` and `make test`.
#
#   scripts/pg.sh start  DIR PORT   initdb DIR on first use, start it on 127.0.0.1:PORT, create
#                                   database "policyd", print its DATABASE_URL
#   scripts/pg.sh stop   DIR PORT   stop it (fast: open connections are cut)
#   scripts/pg.sh status DIR PORT   say whether it runs; exit 0 when it does, 3 when not
#   scripts/pg.sh url    DIR PORT   print the DATABASE_URL
#   scripts/pg.sh database URL NAME create database NAME on the server of URL when missing, print
#                                   URL naming it (the client suites of `make test` each get one;
#                                   psql is installed with PostgreSQL where missing, as for start)
#
# PostgreSQL is installed with apt-get only when no initdb is found on PATH or in
# /usr/lib/postgresql/*/bin. As root, the cluster runs as the postgres user (initdb and postgres
# refuse root), so DIR and its parents must be enterable by that user; this script creates DIR,
# chmods its parents o+x where needed and chowns DIR. The socket directory is DIR itself, and
# the server listens on 127.0.0.1 only, with trust authentication: for development, not for
# production. Messages go to stderr; only the URL goes to stdout.
set -euo pipefail

usage() {
	echo "usage: $0 start|stop|status|url DIR PORT, or $0 database URL NAME" >&2
	exit 2
}

[[ $# -eq 3 ]] || usage
cmd=$1 port=$3
case $cmd in start | stop | status | url) ;; database) port=1 ;; *) usage ;; esac
[[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) || {
	echo "pg.sh: PORT must be a TCP port number, got '$port'" >&2
	exit 2
}
dir=$(realpath -m "$2")
data=$dir/data
log=$dir/postgres.log
url="postgres://postgres@127.0.0.1:$port/policyd?sslmode=disable"

say() { echo "pg.sh: $*" >&2; }
die() {
	say "$*"
	exit 1
}

# bin_dir prints the directory of initdb, pg_ctl and friends, or fails.
bin_dir() {
	local p
	if p=$(command -v initdb 2>/dev/null); then
		p=$(readlink -f "$p")
		if [[ -x $(dirname "$p")/pg_ctl ]]; then
			dirname "$p"
			return
		fi
	fi
	for p in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -V -r); do
		if [[ -x $p/initdb ]]; then
			echo "$p"
			return
		fi
	done
	return 1
}

install_postgres() {
	command -v apt-get >/dev/null || die "PostgreSQL is not installed and there is no apt-get: install PostgreSQL (initdb, pg_ctl) or set DATABASE_URL"
	local sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		command -v sudo >/dev/null || die "PostgreSQL is not installed: run 'apt-get install postgresql' as root, or set DATABASE_URL"
		sudo=(sudo)
	fi
	say "PostgreSQL not found; installing it with apt-get (once)"
	"${sudo[@]}" apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq postgresql >&2
}

# as_owner runs a PostgreSQL program as the cluster's owner: postgres when we are root.
as_owner() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

running() { [[ -f $data/PG_VERSION ]] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; }

if ! bin=$(bin_dir); then
	[[ $cmd == start || $cmd == database ]] || die "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin)"
	install_postgres
	bin=$(bin_dir) || die "apt-get installed postgresql, but no initdb was found"
fi

case $cmd in
url)
	echo "$url"
	;;
database)
	base=$2 name=$3
	[[ $name =~ ^[a-z_][a-z0-9_]*$ ]] || die "NAME must be a plain lower-case database name, got '$name'"
	[[ $base == postgres://* || $base == postgresql://* ]] || die "URL must be a postgres:// URL, got '$base'"
	if [[ $("$bin/psql" "$base" -Atc "SELECT 1 FROM pg_database WHERE datname = '$name'") != 1 ]]; then
		"$bin/psql" "$base" -qc "CREATE DATABASE $name" >&2
	fi
	# The same URL with its path (the database) replaced.
	rest=${base#*://}
	auth_host=${rest%%/*}
	query=""
	[[ $rest == *\?* ]] && query="?${rest#*\?}"
	echo "${base%%://*}://$auth_host/$name$query"
	;;
status)
	if running; then
		say "running: $data on 127.0.0.1:$port"
		echo "$url"
	else
		say "not running: $data"
		exit 3
	fi
	;;
stop)
	if running; then
		as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >&2
	else
		say "not running: $data"
	fi
	;;
start)
	if ! running; then
		mkdir -p "$dir"
		if [[ $(id -u) -eq 0 ]]; then
			id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' user to own the cluster (apt-get install postgresql creates it)"
			chown postgres: "$dir"
			# postgres must be able to reach DIR: let it through every parent directory.
			p=$dir
			while [[ $p != / ]]; do
				p=$(dirname "$p")
				runuser -u postgres -- test -x "$p" || chmod o+x "$p"
			done
		fi
		if [[ ! -f $data/PG_VERSION ]]; then
			say "initdb $data"
			(cd "$dir" && as_owner "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C >"$dir/initdb.log" 2>&1) ||
				die "initdb failed; see $dir/initdb.log"
		fi
		say "starting PostgreSQL on 127.0.0.1:$port (log: $log)"
		(cd "$dir" && as_owner "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
			-o "-p $port -k '$dir' -c listen_addresses=127.0.0.1" start >/dev/null) ||
			die "PostgreSQL did not start; the last lines of $log:
$(tail -n 20 "$log" 2>/dev/null)"
	fi
	for _ in $(seq 1 50); do
		"$bin/pg_isready" -q -h 127.0.0.1 -p "$port" && break
		sleep 0.2
	done
	"$bin/pg_isready" -q -h 127.0.0.1 -p "$port" || die "PostgreSQL started but does not accept connections on 127.0.0.1:$port"
	if [[ $("$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'policyd'") != 1 ]]; then
		"$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc "CREATE DATABASE policyd" >&2
	fi
	echo "$url"
	;;
esac
