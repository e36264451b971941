#!/usr/bin/env bash
# A private, throw-away PostgreSQL server for tests and benchmarks.
#
#   scripts/postgres.sh start DIR   install Debian's postgresql if missing
#                                   (apt-get; needs root), initdb a cluster in
#                                   DIR as the postgres user, start it on a
#                                   free 127.0.0.1 port, create the database
#                                   "sessiond", and print its DSN on stdout
#   scripts/postgres.sh stop DIR    stop that server and remove DIR
#   scripts/postgres.sh restart DIR fast|immediate
#                                   restart it with that shutdown mode
#
# The server listens on 127.0.0.1 only, trusts local connections (it is a
# private test server: never point it at real data) and keeps the settings
# sessiond's guarantees rely on at their defaults (fsync on,
# synchronous_commit on, read committed). Progress goes to stderr; the log is
# DIR/postgres.log.
set -euo pipefail

die() {
	echo "postgres.sh: $*" >&2
	exit 1
}

# pg_bindir prints the newest installed PostgreSQL's bin directory.
pg_bindir() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	[[ -n "$d" && -x "$d/initdb" ]] && echo "$d"
}

ensure_installed() {
	pg_bindir >/dev/null && return 0
	((EUID == 0)) || die "PostgreSQL is not installed and installing it needs root (apt-get install postgresql)"
	echo "postgres.sh: installing Debian's postgresql" >&2
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
	pg_bindir >/dev/null || die "apt-get installed postgresql but no initdb under /usr/lib/postgresql/*/bin"
}

# free_port prints a TCP port that is free on 127.0.0.1 right now, below
# the kernel's ephemeral range, so that no outgoing connection takes it
# before the server binds it.
free_port() {
	local p low=32768
	read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
	((low > 11000)) || low=32768
	for _ in $(seq 1 50); do
		p=$((10000 + RANDOM % (low - 10000)))
		if ! (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	die "no free port found on 127.0.0.1"
}

# as_pg runs a command as the postgres user (or as the caller if that is not
# root: initdb refuses to run as root, and a non-root caller owns DIR).
as_pg() {
	if ((EUID == 0)); then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

start() {
	local dir=$1 bin port attempt
	ensure_installed
	bin=$(pg_bindir)
	mkdir -p "$dir"
	if ((EUID == 0)); then
		id postgres >/dev/null 2>&1 || die "no postgres user (the postgresql package creates it)"
		chown postgres: "$dir"
		chmod 700 "$dir"
	fi
	as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; die "initdb failed"; }
	# The socket goes in DIR too, so nothing needs /var/run/postgresql. A
	# port another process binds between the check and the start is
	# retried on another.
	for attempt in 1 2 3 4 5; do
		port=$(free_port)
		as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=300 -c shared_buffers=128MB" start >&2 && break
		if ((attempt == 5)) || ! grep -q "Address already in use" "$dir/postgres.log"; then
			cat "$dir/postgres.log" >&2
			die "pg_ctl start failed"
		fi
		: >"$dir/postgres.log"
	done
	echo "$port" >"$dir/port"
	as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qAt -c "CREATE DATABASE sessiond" >&2
	echo "postgres://postgres@127.0.0.1:$port/sessiond?sslmode=disable"
}

stop() {
	local dir=$1 bin
	[[ -d "$dir/data" ]] || { rm -rf "$dir"; return 0; }
	bin=$(pg_bindir) || die "PostgreSQL is not installed"
	as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >&2 || true
	rm -rf "$dir"
}

# restart DIR MODE restarts the server in DIR with pg_ctl's shutdown mode
# MODE (fast: clients are cut and the server shuts down cleanly; immediate:
# it stops as in a crash and recovers from its WAL), on the same port.
restart() {
	local dir=$1 mode=$2 bin
	bin=$(pg_bindir) || die "PostgreSQL is not installed"
	as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -m "$mode" -w -t 60 restart >&2 ||
		{ cat "$dir/postgres.log" >&2; die "pg_ctl restart -m $mode failed"; }
}

case "${1:-}" in
start) [[ $# -eq 2 ]] || die "usage: $0 start DIR"; start "$2" ;;
stop) [[ $# -eq 2 ]] || die "usage: $0 stop DIR"; stop "$2" ;;
restart) [[ $# -eq 3 ]] || die "usage: $0 restart DIR fast|immediate"; restart "$2" "$3" ;;
*) die "usage: $0 start DIR | stop DIR | restart DIR fast|immediate" ;;
esac
