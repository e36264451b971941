#!/usr/bin/env bash
# Measures sessiond against its performance targets (docs/performance.md), side by side in
# one run on this machine: the floor (disk append+fdatasync, gRPC unary round
# trip), sessiond's durable appends with 1 and 16 clients, Redis with
# `appendonly yes, appendfsync always` and PostgreSQL with
# `synchronous_commit on` on the same 16-client workload, sessiond on that
# same PostgreSQL (--storage postgres) beside raw pgbench INSERTs, the same
# three on 64 clients writing 1,000 sessions, one client's append p50 on a
# 2,000-message session against a 10-message one, then listing
# 100,000 sessions, start-up with them on disk (after a clean stop, and after
# kill -9 under write load, beside an empty daemon's), and loading a 10,000-message
# session. sessiond's appends are measured both as AppendMessages calls
# (unary) and over AppendStream (streamed: one stream per client, one
# append in flight). Each throughput and latency measurement runs ROUNDS times,
# interleaved (the order of the four stores rotates each round); the table
# shows every round, the medians and the ratios the targets are stated in.
# Around each 16-client run it reads the machine's busy CPU time from
# /proc/stat (the store, its client and anything else running) and, for
# sessiond, the daemon's own: CPU per operation, which tells a store's cost
# apart from waiting where the two cores are not both busy.
#
# Not part of scripts/test.sh: it takes minutes and its numbers are noisy on
# a shared machine. Ratios drift far less between runs than absolutes.
#
# Needs Go, python3, and (installed with apt-get when missing, as root)
# redis-server, redis-tools and postgresql. As root, PostgreSQL runs as the
# `postgres` user (initdb and pg_ctl refuse root).
#
# Everything runs on 127.0.0.1 on free ports, in a temp dir under BENCH_DIR;
# the trap stops every process this script started and removes the dir, on
# success, failure or Ctrl-C.
#
# Settings (environment):
#   BENCH_DIR      parent of the temp dir holding every data dir, and the
#                  filesystem measured (default /var/tmp; not a tmpfs)
#   LIST_DIR       parent of the listing daemon's data dir (default /dev/shm
#                  when it exists, else BENCH_DIR): creating 100,000 sessions
#                  durably on disk takes minutes; listing reads the daemon's
#                  in-memory index either way
#   ROUNDS         rounds of each measurement (default 3)
#   DURATION       seconds of each 16-client run (default 6)
#   CLIENTS        clients (and sessions / keys) of the throughput runs (16)
#   LIST_SESSIONS  sessions listed (default 100000)
#   LOAD_MESSAGES  messages in the loaded session (default 10000)
#   WIDE_CLIENTS   clients of the wide throughput runs (default 64)
#   WIDE_SESSIONS  sessions (keys, PostgreSQL session ids) they write (1000)
#   LONG_MESSAGES  messages in the session of the long-session latency run
#                  (default 2000), compared with a 10-message session
#   KEEP=1         keep the temp dir (its logs) instead of removing it
#   BASELINE=DIR   a second source tree (e.g. `git worktree add /tmp/base
#                  main`): its sessiond runs beside this tree's on the same
#                  16-client workload, every round, and the table compares the
#                  daemons' CPU per append; with PG_ONLY=1, both on
#                  PostgreSQL (unary and streamed, each its own database on
#                  the same server), compared in appends/s and WAL bytes,
#                  and streamed at the wide runs' 64 clients too
#   SYSTEMS        the 16-client systems each round runs, a space-separated
#                  subset of "sessiond_many sessiond_stream_many redis_many
#                  pg_many sessiond_pg_many sessiond_pg_stream_many
#                  sessiond_pg_turns_many baseline_many baseline_pg_many
#                  baseline_pg_stream_many" (default: all that apply but
#                  sessiond_pg_turns_many, a chat's mix of user messages
#                  and answers with a model and usage, whose search
#                  indexing would spill into the runs after it)
#   WIDE=0         skip the 64-client runs
#   WARMUP=1       first run one uncounted round of every throughput system
#                  (16-client and wide), so that each counted round follows
#                  one of every system: the first round otherwise also pays
#                  for opening the daemons' pooled connections and preparing
#                  their statements, and for cold caches and empty tables
#   PG_ONLY=1      of the rounds, run only raw pgbench INSERTs and sessiond
#                  on PostgreSQL, unary and streamed (CLIENTS clients; the
#                  rows of the others print "-"), and log per round the
#                  writing transactions (commits) per sessiond append; its
#                  wide runs (unless WIDE=0) are raw INSERTs and sessiond on
#                  PostgreSQL, unary and streamed: a quicker run for work on
#                  the PostgreSQL driver. Every
#                  PostgreSQL run records its WAL bytes per append (INSERT),
#                  and the PostgreSQL server's own CPU per append (INSERT):
#                  the database's cost, apart from its clients'. Loading and listing
#                  still run: make them small with LOAD_MESSAGES and
#                  LIST_SESSIONS
#   REPORT=FILE    also write the tables as a Markdown page, headed by the
#                  machine they ran on and the command (docs/performance.md
#                  is this page), keeping what the old page had after its
#                  keep marker; MACHINE_NOTE adds a sentence about the machine
#
# Usage: scripts/bench-compare.sh
set -euo pipefail

cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-6}
CLIENTS=${CLIENTS:-16}
SIZE=1024
LIST_SESSIONS=${LIST_SESSIONS:-100000}
LOAD_MESSAGES=${LOAD_MESSAGES:-10000}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
WIDE_CLIENTS=${WIDE_CLIENTS:-64}
WIDE_SESSIONS=${WIDE_SESSIONS:-1000}
LONG_MESSAGES=${LONG_MESSAGES:-2000}
PG_ONLY=${PG_ONLY:-0}
REPORT=${REPORT:-}
if [[ -z ${LIST_DIR:-} ]]; then
	if [[ -d /dev/shm && -w /dev/shm ]]; then LIST_DIR=/dev/shm; else LIST_DIR=$BENCH_DIR; fi
fi

log() { printf 'bench: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# --- clean-up: every process and directory this script made ---

work=""
listwork=""
pids=()
pg_data=""
cleanup() {
	local rc=$?
	set +e
	for pid in "${pids[@]}"; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null
			# Give a clean stop 10 s, then cut it off.
			for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
			kill -KILL "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
		fi
	done
	if [[ -n $pg_data && -f $pg_data/postmaster.pid ]]; then
		as_pg "$PGBIN/pg_ctl" -D "$pg_data" -m immediate -w stop >/dev/null 2>&1
	fi
	if [[ ${KEEP:-0} == 1 ]]; then
		log "kept $work ${listwork}"
	else
		[[ -n $work ]] && rm -rf "$work"
		[[ -n $listwork ]] && rm -rf "$listwork"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# stop_pid ends one process we started and forgets it.
stop_pid() {
	local pid=$1 keep=() p
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for p in "${pids[@]}"; do [[ $p != "$pid" ]] && keep+=("$p"); done
	pids=("${keep[@]}")
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- tools: install only what is missing ---

need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-benchmark >/dev/null || need_apt+=(redis-tools)
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
if [[ -z $PGBIN || ! -x $PGBIN/initdb || ! -x $PGBIN/pgbench ]]; then
	need_apt+=(postgresql postgresql-contrib)
fi
if ((${#need_apt[@]})); then
	[[ $EUID == 0 ]] || die "missing ${need_apt[*]}; install them (apt-get install ${need_apt[*]}) or run as root"
	log "installing ${need_apt[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >&2 ||
		{ apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >&2; }
	PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi
command -v python3 >/dev/null || die "python3 is needed to summarise"

if [[ $EUID == 0 ]]; then
	as_pg() { runuser -u postgres -- "$@"; }
else
	as_pg() { "$@"; }
fi

# write_report TABLE prints the Markdown page of REPORT: the machine, the
# command, then the tables.
started=$(date -u '+%Y-%m-%d %H:%M UTC')
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
write_report() {
	local settings="" v
	for v in ROUNDS DURATION CLIENTS LIST_SESSIONS LOAD_MESSAGES WIDE_CLIENTS WIDE_SESSIONS LONG_MESSAGES WIDE WARMUP PG_ONLY SYSTEMS BASELINE; do
		[[ -n ${!v+x} && -n ${!v} ]] && settings+="$v=${!v} "
	done
	cat <<-MD
		# Performance

		The latest run of \`scripts/bench-compare.sh\`, which writes this page
		(\`REPORT=docs/performance.md\`). What each row measures, the targets and how
		to run it: [development.md](development.md#measuring-performance).

		- **Run:** $started to $(date -u '+%H:%M UTC'), \`${settings}scripts/bench-compare.sh\`
		- **Machine:** $(nproc) cores ($(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)), $(awk '/^MemTotal/{printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) of memory, Linux $(uname -r), data on $fstype ($BENCH_DIR); load average at the start $load_at_start
		- **Versions:** $(go version | cut -d' ' -f3), Redis $(redis-server --version | awk '{print $3}' | cut -d= -f2), PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'), sessiond $(git describe --tags --always --dirty 2>/dev/null || echo unknown)
	MD
	[[ -n ${MACHINE_NOTE:-} ]] && printf -- '- **Note:** %s\n' "$MACHINE_NOTE"
	echo
	cat "$1"
}

# --- temp dirs and binaries ---

work=$(mktemp -d "$BENCH_DIR/sessiond-bench.XXXXXX")
chmod 711 "$work" # PostgreSQL's user must reach its data dir inside
listwork=$(mktemp -d "$LIST_DIR/sessiond-bench-list.XXXXXX")
fstype=$(df --output=fstype "$work" | tail -n 1)
[[ $fstype == tmpfs ]] && log "warning: $work is on tmpfs; fsync costs nothing there, so every durable number is meaningless"
results=$work/results.tsv
: >"$results"
warming=0 # 1 during WARMUP's round, whose figures are not recorded
record() { ((warming)) || printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$results"; } # round metric value

# CPU per operation of a run: the whole machine's busy time (the store, its
# client and anything else running) and one process's, in clock ticks read
# before and after the run.
HZ=$(getconf CLK_TCK)
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; } # user nice system irq softirq
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }                # utime stime
# cpu_us TICKS OPS prints the microseconds of CPU per operation.
cpu_us() { python3 -c "print($1 * 1e6 / $HZ / max($2, 1))"; }
# cpu_mark [PID] [pg] prints the ticks used so far by the machine, by PID
# (0 without one) and, given pg, by the PostgreSQL server (pg_ticks).
cpu_mark() {
	local proc=0 server=""
	[[ -n ${1:-} ]] && proc=$(proc_ticks "$1")
	[[ ${2:-} == pg ]] && server=$(pg_ticks)
	echo "$(busy_ticks) $proc $server"
}
# record_cpu ROUND NAME BEFORE AFTER OPS [PID] records the CPU per operation
# between two cpu_marks: NAME_cpu_us for the machine, NAME_daemon_cpu_us for
# PID, and NAME_server_cpu_us for the PostgreSQL server when the marks hold
# its ticks.
record_cpu() {
	local b0 p0 s0 b1 p1 s1
	read -r b0 p0 s0 <<<"$3"
	read -r b1 p1 s1 <<<"$4"
	record "$1" "$2_cpu_us" "$(cpu_us $((b1 - b0)) "$5")"
	if [[ -n ${6:-} ]]; then
		record "$1" "$2_daemon_cpu_us" "$(cpu_us $((p1 - p0)) "$5")"
	fi
	if [[ -n $s0 ]]; then
		record "$1" "$2_server_cpu_us" "$(cpu_us $((s1 - s0)) "$5")"
	fi
}

log "building sessiond and sessiond-load into $work/bin"
go build -o "$work/bin/sessiond" ./cmd/sessiond
go build -o "$work/bin/sessiond-load" ./cmd/sessiond-load
if [[ -n ${BASELINE:-} ]]; then
	log "building the baseline sessiond from $BASELINE"
	(cd "$BASELINE" && go build -o "$work/bin/sessiond-baseline" ./cmd/sessiond)
fi
LOAD=$work/bin/sessiond-load
json() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {"d": d}))' "$1"; }

# --- start the three stores ---

# start_sessiond DATA_DIR PORT [FLAG...]: starts a daemon and waits until it
# answers.
start_sessiond() {
	"${SESSIOND_BIN:-$work/bin/sessiond}" --listen "127.0.0.1:$2" --data-dir "$1" --log-level warn "${@:3}" >>"$work/sessiond-$2.log" 2>&1 &
	pids+=($!)
	wait_ready "$2" || die "sessiond on port $2 did not start; see $work/sessiond-$2.log"
}

# seconds_since NS: the seconds since NS (date +%s%N), taken now: timing
# in the shell, as an interpreter's own start-up would add to the figure.
seconds_since() {
	local ms=$((($(date +%s%N) - $1) / 1000000))
	printf '%d.%03d\n' $((ms / 1000)) $((ms % 1000))
}

# wait_ready PORT: until a health check succeeds (at most 60 s). A check
# made while the daemon is still opening its store waits for it.
wait_ready() {
	local end=$((SECONDS + 60))
	while ((SECONDS < end)); do
		"$LOAD" --addr "127.0.0.1:$1" --timeout 60s health --count 1 --warmup 0 >/dev/null 2>&1 && return 0
		sleep 0.02
	done
	return 1
}

# With a metrics endpoint, the append runs report the mean appends per
# flush (the file store's write-ahead log batch size). The baseline daemon
# gets the same flags and is scraped the same way, so that the two daemons'
# CPU per append compares like with like. metrics_flags BIN DAEMON LOAD sets
# the arrays DAEMON and LOAD to BIN's daemon flags and the load tool's.
metrics_flags() {
	local -n daemon=$2 load=$3
	daemon=() load=()
	if "$1" --help 2>&1 | grep -q -- --metrics-listen; then
		local port
		port=$(free_port)
		daemon=(--metrics-listen "127.0.0.1:$port")
		load=(--metrics "127.0.0.1:$port")
	fi
}
SD_PORT=$(free_port)
metrics_flags "$work/bin/sessiond" sd_flags flush_metrics
start_sessiond "$work/sessiond" "$SD_PORT" "${sd_flags[@]}"
SD=127.0.0.1:$SD_PORT
SD_PID=${pids[-1]}
log "sessiond on $SD, data in $work/sessiond ($fstype)"
if [[ -n ${BASELINE:-} ]]; then
	BASE_PORT=$(free_port)
	metrics_flags "$work/bin/sessiond-baseline" base_flags base_metrics
	SESSIOND_BIN=$work/bin/sessiond-baseline start_sessiond "$work/sessiond-baseline" "$BASE_PORT" "${base_flags[@]}"
	BASE=127.0.0.1:$BASE_PORT
	BASE_PID=${pids[-1]}
	log "baseline sessiond (from $BASELINE) on $BASE"
fi

REDIS_PORT=$(free_port)
mkdir -p "$work/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --protected-mode yes --dir "$work/redis" \
	--appendonly yes --appendfsync always --save "" --daemonize no \
	--logfile "$work/redis/redis.log" &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
[[ $(redis-cli -p "$REDIS_PORT" config get appendfsync | tail -n 1) == always ]] || die "redis did not start with appendfsync always; see $work/redis/redis.log"
log "redis $(redis-server --version | awk '{print $3}') on 127.0.0.1:$REDIS_PORT, appendonly yes, appendfsync always"

PG_PORT=$(free_port)
mkdir -p "$work/pg"
[[ $EUID == 0 ]] && chown postgres: "$work/pg"
pg_data=$work/pg/data
as_pg "$PGBIN/initdb" -D "$pg_data" -U postgres -A trust -E UTF8 --no-instructions >"$work/pg/initdb.log" 2>&1 ||
	die "initdb failed; see $work/pg/initdb.log"
as_pg "$PGBIN/pg_ctl" -D "$pg_data" -l "$work/pg/server.log" -w -t 60 \
	-o "-c port=$PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$work/pg -c fsync=on -c synchronous_commit=on -c max_connections=100" \
	start >/dev/null || die "PostgreSQL did not start; see $work/pg/server.log"
psql_() { "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres "$@"; }
psql_ -c "CREATE TABLE messages (session int NOT NULL, seq bigserial, body text NOT NULL, PRIMARY KEY (session, seq))"
log "postgresql $(psql_ -At -c 'SHOW server_version') on 127.0.0.1:$PG_PORT, synchronous_commit=$(psql_ -At -c 'SHOW synchronous_commit'), wal_sync_method=$(psql_ -At -c 'SHOW wal_sync_method')"

# sessiond on the same PostgreSQL server (its own database), a pool as large
# as the client count.
psql_ -c "CREATE DATABASE sessiond"
SDPG_PORT=$(free_port)
start_sessiond "$work/sessiond-pg" "$SDPG_PORT" --storage postgres --postgres-max-conns "$CLIENTS" \
	--postgres-dsn "postgres://postgres@127.0.0.1:$PG_PORT/sessiond?sslmode=disable"
SDPG=127.0.0.1:$SDPG_PORT
SDPG_PID=${pids[-1]}
log "sessiond --storage postgres on $SDPG"
if [[ -n ${BASELINE:-} && $PG_ONLY == 1 ]]; then
	psql_ -c "CREATE DATABASE sessiond_base"
	BASEPG_PORT=$(free_port)
	SESSIOND_BIN=$work/bin/sessiond-baseline start_sessiond "$work/sessiond-base-pg" "$BASEPG_PORT" --storage postgres \
		--postgres-max-conns "$CLIENTS" --postgres-dsn "postgres://postgres@127.0.0.1:$PG_PORT/sessiond_base?sslmode=disable"
	BASEPG=127.0.0.1:$BASEPG_PORT
	BASEPG_PID=${pids[-1]}
	log "baseline sessiond --storage postgres on $BASEPG"
fi

# The same 1 KiB of letters for every store's message body.
body=$(python3 -c "import random,string; print(''.join(random.choice(string.ascii_letters+string.digits) for _ in range($SIZE)))")
# Client i inserts into session i mod CLIENTS, one durable commit each.
cat >"$work/pg/append.sql" <<EOF
\set s :client_id % $CLIENTS
INSERT INTO messages (session, body) VALUES (:s, '$body');
EOF

# The wide runs: each insert goes to a random one of WIDE_SESSIONS sessions.
cat >"$work/pg/append-wide.sql" <<EOF
\set s random(0, $((WIDE_SESSIONS - 1)))
INSERT INTO messages (session, body) VALUES (:s, '$body');
EOF

# --- the measurements ---

floor() {
	local r=$1 out
	out=$("$LOAD" --json fsync --dir "$work" --count 2000 --duration 3s)
	record "$r" fsync_p50_ms "$(json "d['latency_ms']['p50']" <<<"$out")"
	out=$("$LOAD" --json --addr "$SD" health --count 3000 --duration 3s)
	record "$r" health_p50_ms "$(json "d['latency_ms']['p50']" <<<"$out")"
}

# The 1-client p50 is held against the floor, whose round trip is grpc-go's
# (health): so its appends go through grpc-go's client too, not the lean one
# the throughput runs use to spare the CPU.
sessiond_one() {
	local r=$1 out
	out=$("$LOAD" --json --addr "$SD" --namespace "one-$r" append --client grpc --clients 1 --count 2000 --duration 4s --size "$SIZE")
	record "$r" sessiond_1c_p50_ms "$(json "d['latency_ms']['p50']" <<<"$out")"
	out=$("$LOAD" --json --addr "$SD" --namespace "ones-$r" append --rpc stream --client grpc --clients 1 --count 2000 --duration 4s --size "$SIZE")
	record "$r" sessiond_stream_1c_p50_ms "$(json "d['latency_ms']['p50']" <<<"$out")"
}

# The 16-client run of sessiond_many, streamed.
sessiond_stream_many() {
	local r=$1 out before after
	before=$(cpu_mark "$SD_PID")
	out=$("$LOAD" --json --addr "$SD" --namespace "manys-$r" append --rpc stream --clients "$CLIENTS" --sessions "$CLIENTS" \
		--count 10000000 --duration "${DURATION}s" --size "$SIZE" "${flush_metrics[@]}")
	after=$(cpu_mark "$SD_PID")
	record_cpu "$r" sessiond_stream "$before" "$after" "$(json "d['ops']" <<<"$out")" "$SD_PID"
	record "$r" sessiond_stream_ops "$(json "d['ops_per_sec']" <<<"$out")"
	record "$r" sessiond_stream_16c_p50_ms "$(json "d['latency_ms']['p50']" <<<"$out")"
	record "$r" sessiond_stream_16c_batch "$(json "d.get('daemon_metrics', {}).get('appends_per_flush', 'nan')" <<<"$out")"
}

sessiond_many() {
	local r=$1 out before after
	before=$(cpu_mark "$SD_PID")
	out=$("$LOAD" --json --addr "$SD" --namespace "many-$r" append --clients "$CLIENTS" --sessions "$CLIENTS" \
		--count 10000000 --duration "${DURATION}s" --size "$SIZE" "${flush_metrics[@]}")
	after=$(cpu_mark "$SD_PID")
	record_cpu "$r" sessiond "$before" "$after" "$(json "d['ops']" <<<"$out")" "$SD_PID"
	record "$r" sessiond_ops "$(json "d['ops_per_sec']" <<<"$out")"
	record "$r" sessiond_16c_p50_ms "$(json "d['latency_ms']['p50']" <<<"$out")"
	record "$r" sessiond_16c_batch "$(json "d.get('daemon_metrics', {}).get('appends_per_flush', 'nan')" <<<"$out")"
	# The same run through grpc-go's client, as the SDK calls: what the lean
	# measuring client spares the shared CPU, shown beside it.
	out=$("$LOAD" --json --addr "$SD" --namespace "manyg-$r" append --client grpc --clients "$CLIENTS" --sessions "$CLIENTS" \
		--count 10000000 --duration "${DURATION}s" --size "$SIZE")
	record "$r" sessiond_grpc_ops "$(json "d['ops_per_sec']" <<<"$out")"
}

# The baseline daemon on sessiond_many's workload, both runs, so that each
# daemon's measured run follows the same work.
baseline_many() {
	local r=$1 out before after
	before=$(cpu_mark "$BASE_PID")
	out=$("$LOAD" --json --addr "$BASE" --namespace "many-$r" append --clients "$CLIENTS" --sessions "$CLIENTS" \
		--count 10000000 --duration "${DURATION}s" --size "$SIZE" "${base_metrics[@]}")
	after=$(cpu_mark "$BASE_PID")
	record_cpu "$r" baseline "$before" "$after" "$(json "d['ops']" <<<"$out")" "$BASE_PID"
	record "$r" baseline_ops "$(json "d['ops_per_sec']" <<<"$out")"
	record "$r" baseline_16c_batch "$(json "d.get('daemon_metrics', {}).get('appends_per_flush', 'nan')" <<<"$out")"
	out=$("$LOAD" --json --addr "$BASE" --namespace "manyg-$r" append --client grpc --clients "$CLIENTS" --sessions "$CLIENTS" \
		--count 10000000 --duration "${DURATION}s" --size "$SIZE")
	record "$r" baseline_grpc_ops "$(json "d['ops_per_sec']" <<<"$out")"
}

# --- wide: WIDE_CLIENTS clients on WIDE_SESSIONS sessions ---

sessiond_wide() {
	local r=$1 out
	out=$("$LOAD" --json --addr "$SD" --namespace "wide-$r" append --clients "$WIDE_CLIENTS" --sessions "$WIDE_SESSIONS" \
		--count 10000000 --duration "${DURATION}s" --size "$SIZE" --warmup 1 "${flush_metrics[@]}")
	record "$r" sessiond_wide_ops "$(json "d['ops_per_sec']" <<<"$out")"
	record "$r" sessiond_wide_p50_ms "$(json "d['latency_ms']['p50']" <<<"$out")"
	record "$r" sessiond_wide_batch "$(json "d.get('daemon_metrics', {}).get('appends_per_flush', 'nan')" <<<"$out")"
}

sessiond_stream_wide() {
	local r=$1 out
	out=$("$LOAD" --json --addr "$SD" --namespace "wides-$r" append --rpc stream --clients "$WIDE_CLIENTS" --sessions "$WIDE_SESSIONS" \
		--count 10000000 --duration "${DURATION}s" --size "$SIZE" --warmup 1)
	record "$r" sessiond_stream_wide_ops "$(json "d['ops_per_sec']" <<<"$out")"
	record "$r" sessiond_stream_wide_p50_ms "$(json "d['latency_ms']['p50']" <<<"$out")"
}

redis_wide_n=20000
redis_wide() {
	local r=$1 line rps
	line=$(timeout 300 redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$WIDE_CLIENTS" -n "$redis_wide_n" -r "$WIDE_SESSIONS" --csv \
		RPUSH "w:__rand_int__" "$body" | tail -n 1)
	rps=$(python3 -c 'import csv,sys; print(list(csv.reader([sys.argv[1]]))[0][1])' "$line")
	record "$r" redis_wide_ops "$rps"
	redis_wide_n=$(python3 -c "print(max(5000, int(float('$rps') * $DURATION)))")
}

pg_wide() {
	local r=$1 out
	out=$("$PGBIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -n -c "$WIDE_CLIENTS" -j 2 -T "$DURATION" \
		-f "$work/pg/append-wide.sql" postgres 2>&1) || die "pgbench failed: $out"
	record "$r" pg_wide_ops "$(awk '/^tps = /{print $3}' <<<"$out")"
}

# --- long sessions: one client's append p50 at LONG_MESSAGES messages and at 10 ---

sessiond_long() {
	local r=$1 out n
	for n in 10 "$LONG_MESSAGES"; do
		out=$("$LOAD" --json --addr "$SD" --namespace "long-$n-$r" append --clients 1 --prefill "$n" \
			--count 2000 --duration 4s --size "$SIZE")
		record "$r" "sessiond_len${n}_p50_ms" "$(json "d['latency_ms']['p50']" <<<"$out")"
	done
}

# pg_daemon_run ROUND NAME ADDR PID RPC: CLIENTS clients append to a daemon
# on PostgreSQL (RPC unary or stream), recorded as NAME_*, with the WAL
# bytes per append.
pg_daemon_run() {
	local r=$1 name=$2 addr=$3 pid=$4 rpc=$5 out xact0 wal0 xact1 wal1 before after n
	read -r xact0 wal0 < <(pg_counters)
	before=$(cpu_mark "$pid" pg)
	out=$("$LOAD" --json --addr "$addr" --namespace "$name-$r" append --rpc "$rpc" --clients "$CLIENTS" --sessions "$CLIENTS" \
		--count 10000000 --duration "${DURATION}s" --size "$SIZE" "${@:6}")
	after=$(cpu_mark "$pid" pg)
	read -r xact1 wal1 < <(pg_counters)
	n=$(json "d['ops']" <<<"$out")
	record_cpu "$r" "$name" "$before" "$after" "$n" "$pid"
	record "$r" "${name}_ops" "$(json "d['ops_per_sec']" <<<"$out")"
	record "$r" "${name}_16c_p50_ms" "$(json "d['latency_ms']['p50']" <<<"$out")"
	record "$r" "${name}_wal_bytes" "$(python3 -c "print(($wal1 - $wal0) / max($n, 1))")"
	if [[ $PG_ONLY == 1 ]]; then
		log "round $r: $name: $n appends, $(python3 -c "print(round(($xact1 - $xact0) / max($n, 1), 2))") writing transactions and $(python3 -c "print(round(($wal1 - $wal0) / max($n, 1)))") WAL bytes per append"
	fi
}

# pg_daemon_wide ROUND NAME ADDR RPC: WIDE_CLIENTS clients append to
# WIDE_SESSIONS sessions of the daemon on PostgreSQL at ADDR, recorded as
# NAME_*.
pg_daemon_wide() {
	local r=$1 name=$2 addr=$3 rpc=$4 out
	out=$("$LOAD" --json --addr "$addr" --namespace "$name-$r" append --rpc "$rpc" --clients "$WIDE_CLIENTS" \
		--sessions "$WIDE_SESSIONS" --count 10000000 --duration "${DURATION}s" --size "$SIZE" --warmup 1)
	record "$r" "${name}_ops" "$(json "d['ops_per_sec']" <<<"$out")"
	record "$r" "${name}_p50_ms" "$(json "d['latency_ms']['p50']" <<<"$out")"
}

sessiond_pg_wide() { pg_daemon_wide "$1" sessiond_pg_wide "$SDPG" unary; }
sessiond_pg_stream_wide() { pg_daemon_wide "$1" sessiond_pg_stream_wide "$SDPG" stream; }
baseline_pg_stream_wide() { pg_daemon_wide "$1" baseline_pg_stream_wide "$BASEPG" stream; }
sessiond_pg_many() { pg_daemon_run "$1" sessiond_pg "$SDPG" "$SDPG_PID" unary; }
sessiond_pg_stream_many() { pg_daemon_run "$1" sessiond_pg_stream "$SDPG" "$SDPG_PID" stream; }
# A chat's mix: every second append an assistant's answer with a model and
# usage, which changes the session's tally (sessiond-load --turns).
sessiond_pg_turns_many() { pg_daemon_run "$1" sessiond_pg_turns "$SDPG" "$SDPG_PID" unary --turns; }
baseline_pg_many() { pg_daemon_run "$1" baseline_pg "$BASEPG" "$BASEPG_PID" unary; }
baseline_pg_stream_many() { pg_daemon_run "$1" baseline_pg_stream "$BASEPG" "$BASEPG_PID" stream; }

# pg_ticks prints the ticks used so far by the PostgreSQL server: the
# postmaster, the children it has reaped (backends of ended connections)
# and those still running (backends, WAL writer, checkpointer, autovacuum).
pg_ticks() {
	local t c
	t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$(pg_pid)/stat")
	for c in $(pg_kids); do
		t=$((t + $(proc_ticks "$c" 2>/dev/null || echo 0)))
	done
	echo "$t"
}
pg_pid() { head -n 1 "$pg_data/postmaster.pid"; }
# pg_kids prints the pids of the postmaster's children.
pg_kids() { ps -o pid= --ppid "$(pg_pid)"; }
# pg_settle N waits (up to 3 s) until at most N children run: a backend
# whose client has just left is still exiting, and its ticks reach the
# postmaster's (pg_ticks) only once reaped.
pg_settle() {
	local i
	for ((i = 0; i < 60 && $(pg_kids | wc -l) > $1; i++)); do
		sleep 0.05
	done
}

# pg_counters prints the server's next transaction id (the count of
# writing transactions so far) and its WAL position in bytes.
pg_counters() {
	psql_ -At -F ' ' -c "SELECT txid_snapshot_xmax(txid_current_snapshot()), pg_current_wal_lsn() - '0/0'"
}

# redis-benchmark is bounded by count, not time: each run's count is the
# previous rate times DURATION, so runs last about as long as the others.
redis_n=20000
redis_many() {
	local r=$1 line rps p50 before after
	before=$(cpu_mark)
	line=$(timeout 300 redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$CLIENTS" -n "$redis_n" -r "$CLIENTS" --csv \
		RPUSH "s:__rand_int__" "$body" | tail -n 1)
	after=$(cpu_mark)
	record_cpu "$r" redis "$before" "$after" "$redis_n"
	rps=$(python3 -c 'import csv,sys; print(list(csv.reader([sys.argv[1]]))[0][1])' "$line")
	p50=$(python3 -c 'import csv,sys; print(list(csv.reader([sys.argv[1]]))[0][4])' "$line")
	record "$r" redis_ops "$rps"
	record "$r" redis_16c_p50_ms "$p50"
	redis_n=$(python3 -c "print(max(5000, int(float('$rps') * $DURATION)))")
	line=$(timeout 120 redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c 1 -n 1000 --csv RPUSH "s:one" "$body" | tail -n 1)
	record "$r" redis_1c_p50_ms "$(python3 -c 'import csv,sys; print(list(csv.reader([sys.argv[1]]))[0][4])' "$line")"
}

pg_many() {
	local r=$1 out before after wal0 wal1 n kids
	read -r _ wal0 < <(pg_counters)
	kids=$(pg_kids | wc -l)
	before=$(cpu_mark "" pg)
	out=$("$PGBIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -n -c "$CLIENTS" -j 2 -T "$DURATION" \
		-f "$work/pg/append.sql" postgres 2>&1) || die "pgbench failed: $out"
	pg_settle "$kids"
	after=$(cpu_mark "" pg)
	read -r _ wal1 < <(pg_counters)
	n=$(awk '/^number of transactions actually processed/{split($NF, a, "/"); print a[1]}' <<<"$out")
	record_cpu "$r" pg "$before" "$after" "$n"
	record "$r" pg_wal_bytes "$(python3 -c "print(($wal1 - $wal0) / max($n, 1))")"
	record "$r" pg_ops "$(awk '/^tps = /{print $3}' <<<"$out")"
	record "$r" pg_16c_avg_ms "$(awk '/^latency average = /{print $4}' <<<"$out")"
	out=$("$PGBIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -n -c 1 -T 2 -f "$work/pg/append.sql" postgres 2>&1) ||
		die "pgbench failed: $out"
	record "$r" pg_1c_avg_ms "$(awk '/^latency average = /{print $4}' <<<"$out")"
}

systems=(sessiond_many sessiond_stream_many redis_many pg_many sessiond_pg_many)
wide=(sessiond_wide sessiond_stream_wide redis_wide pg_wide)
if [[ $PG_ONLY == 1 ]]; then
	systems=(pg_many sessiond_pg_many sessiond_pg_stream_many)
	if [[ -n ${BASELINE:-} ]]; then
		systems+=(baseline_pg_many)
		# A baseline from before AppendStream has no streamed appends to measure.
		grep -q 'rpc AppendStream' "$BASELINE/proto/sessiond/v1/sessiond.proto" && systems+=(baseline_pg_stream_many)
	fi
	wide=(pg_wide sessiond_pg_wide sessiond_pg_stream_wide)
	[[ " ${systems[*]} " == *" baseline_pg_stream_many "* ]] && wide+=(baseline_pg_stream_wide)
elif [[ -n ${BASELINE:-} ]]; then
	systems+=(baseline_many)
fi
if [[ -n ${SYSTEMS:-} ]]; then
	read -r -a systems <<<"$SYSTEMS"
fi
[[ ${WIDE:-1} == 0 ]] && wide=()
if [[ ${WARMUP:-0} == 1 ]]; then
	warming=1
	for s in "${systems[@]}" "${wide[@]}"; do
		log "warm-up round (not counted): $s"
		"$s" 0
	done
	warming=0
fi
for ((r = 1; r <= ROUNDS; r++)); do
	if [[ $PG_ONLY == 1 ]]; then
		for ((i = 0; i < ${#systems[@]}; i++)); do
			s=${systems[$(((i + r - 1) % ${#systems[@]}))]}
			log "round $r/$ROUNDS: $s ($CLIENTS clients, ${DURATION}s)"
			"$s" "$r"
		done
		for ((i = 0; i < ${#wide[@]}; i++)); do
			s=${wide[$(((i + r - 1) % ${#wide[@]}))]}
			log "round $r/$ROUNDS: $s ($WIDE_CLIENTS clients on $WIDE_SESSIONS sessions, ${DURATION}s)"
			"$s" "$r"
		done
		continue
	fi
	log "round $r/$ROUNDS: floor"
	floor "$r"
	log "round $r/$ROUNDS: sessiond, 1 client"
	sessiond_one "$r"
	for ((i = 0; i < ${#systems[@]}; i++)); do
		s=${systems[$(((i + r - 1) % ${#systems[@]}))]}
		log "round $r/$ROUNDS: $s ($CLIENTS clients, ${DURATION}s)"
		"$s" "$r"
	done
	for ((i = 0; i < ${#wide[@]}; i++)); do
		s=${wide[$(((i + r - 1) % ${#wide[@]}))]}
		log "round $r/$ROUNDS: $s ($WIDE_CLIENTS clients on $WIDE_SESSIONS sessions, ${DURATION}s)"
		"$s" "$r"
	done
	log "round $r/$ROUNDS: sessiond, 1 client, sessions of 10 and $LONG_MESSAGES messages"
	sessiond_long "$r"
done

log "loading a $LOAD_MESSAGES-message session"
out=$("$LOAD" --json --addr "$SD" --namespace load load --messages "$LOAD_MESSAGES" --size "$SIZE" --repeat "$ROUNDS")
python3 -c 'import json,sys
d=json.load(sys.stdin)
for i, r in enumerate(d["runs"], 1): print(i, "load_msgs_per_s", r["messages_per_sec"], sep="\t")' <<<"$out" >>"$results"

# Listing: a second daemon whose data dir is in LIST_DIR, filled in one run
# (the file store bounds its open journals, so this also shows that creating
# more sessions than `ulimit -n` works).
LIST_PORT=$(free_port)
log "creating $LIST_SESSIONS sessions in $listwork ($(df --output=fstype "$listwork" | tail -n 1))"
start_sessiond "$listwork/data" "$LIST_PORT"
out=$("$LOAD" --json --addr "127.0.0.1:$LIST_PORT" --namespace list list --populate "$LIST_SESSIONS" --clients 16 --repeat 1)
populate_s=$(json "d['populate_seconds']" <<<"$out")
stop_pid "${pids[-1]}"
log "created them in $(python3 -c "print(round($populate_s, 1))") s"
log "restarting the listing daemon with $LIST_SESSIONS sessions on disk"
for ((r = 1; r <= ROUNDS; r++)); do
	start=$(date +%s%N)
	start_sessiond "$listwork/data" "$LIST_PORT"
	record "$r" startup_s "$(seconds_since "$start")"
	out=$("$LOAD" --json --addr "127.0.0.1:$LIST_PORT" --namespace list list --repeat 1)
	[[ $(json "d['sessions']" <<<"$out") == "$LIST_SESSIONS" ]] || die "listed $(json "d['sessions']" <<<"$out") sessions, not $LIST_SESSIONS"
	record "$r" list_first_ms "$(json "d['first_ms_median']" <<<"$out")"
	record "$r" list_all_ms "$(json "d['all_ms_median']" <<<"$out")"
	out=$("$LOAD" --json --addr "127.0.0.1:$LIST_PORT" --namespace list list --repeat 1)
	record "$r" list_warm_first_ms "$(json "d['first_ms_median']" <<<"$out")"
	record "$r" list_warm_all_ms "$(json "d['all_ms_median']" <<<"$out")"
	record "$r" list_rss_mib "$(awk '/^VmRSS/ {print $2 / 1024}' "/proc/${pids[-1]}/status")"
	# kill -9 under write load: CLIENTS clients appending to WIDE_SESSIONS
	# sessions (in another namespace) for 5 s, then the restart is timed.
	"$LOAD" --addr "127.0.0.1:$LIST_PORT" --namespace crash append --clients "$CLIENTS" --sessions "$WIDE_SESSIONS" \
		--size "$SIZE" --duration 60s --count 100000000 >/dev/null 2>&1 &
	loader=$!
	pids+=("$loader")
	sleep 5
	kill -KILL "${pids[-2]}"
	stop_pid "${pids[-2]}"
	stop_pid "$loader"
	start=$(date +%s%N)
	start_sessiond "$listwork/data" "$LIST_PORT"
	record "$r" startup_kill_s "$(seconds_since "$start")"
	stop_pid "${pids[-1]}"
	# An empty daemon's start-up on this machine now: what the above cost
	# beyond starting at all (a loaded machine slows both).
	rm -rf "$listwork/empty"
	start=$(date +%s%N)
	start_sessiond "$listwork/empty" "$LIST_PORT"
	record "$r" startup_empty_s "$(seconds_since "$start")"
	stop_pid "${pids[-1]}"
done

# --- the table ---

{
python3 - "$results" "$CLIENTS" "$SIZE" "$LIST_SESSIONS" "$LOAD_MESSAGES" "$WIDE_CLIENTS" "$WIDE_SESSIONS" "$LONG_MESSAGES" <<'EOF'
import collections, math, statistics, sys
path, clients, size, nlist, nload, wclients, wsessions, nlong = sys.argv[1:]
vals = collections.defaultdict(dict)
for line in open(path):
    r, k, v = line.rstrip("\n").split("\t")
    try:
        x = float(v)
    except ValueError:  # a run whose output had no figure (its row shows "-")
        continue
    if not math.isnan(x):
        vals[k][int(r)] = x
rounds = sorted({r for d in vals.values() for r in d})
med = {k: statistics.median(d.values()) for k, d in vals.items()}

def row(label, key, fmt="{:.3f}", unit=""):
    d = vals.get(key, {})
    cells = [fmt.format(d[r]) if r in d else "-" for r in rounds]
    m = fmt.format(med[key]) if key in med else "-"
    print(f"| {label} | " + " | ".join(cells) + f" | {m}{unit} |")

hdr = "| measurement | " + " | ".join(f"run {r}" for r in rounds) + " | median |"
print(hdr)
print("|" + "---|" * (len(rounds) + 2))
row(f"disk append {size} B + fdatasync p50 (ms)", "fsync_p50_ms")
row("gRPC health round trip p50 (ms)", "health_p50_ms")
row(f"sessiond append, 1 client, p50 (ms)", "sessiond_1c_p50_ms")
row(f"sessiond streamed append, 1 client, p50 (ms)", "sessiond_stream_1c_p50_ms")
row("Redis RPUSH, 1 client, p50 (ms)", "redis_1c_p50_ms")
row("PostgreSQL INSERT, 1 client, mean (ms)", "pg_1c_avg_ms")
row(f"sessiond appends/s, {clients} clients on {clients} sessions", "sessiond_ops", "{:.0f}")
row(f"sessiond appends/s, {clients} clients on {clients} sessions, grpc-go client", "sessiond_grpc_ops", "{:.0f}")
row(f"sessiond streamed appends/s, {clients} clients on {clients} sessions", "sessiond_stream_ops", "{:.0f}")
row(f"Redis appendfsync always RPUSH/s, {clients} clients on {clients} keys", "redis_ops", "{:.0f}")
row(f"PostgreSQL synchronous_commit on INSERT/s, {clients} clients", "pg_ops", "{:.0f}")
row(f"sessiond on PostgreSQL appends/s, {clients} clients on {clients} sessions", "sessiond_pg_ops", "{:.0f}")
row(f"sessiond on PostgreSQL streamed appends/s, {clients} clients on {clients} sessions", "sessiond_pg_stream_ops", "{:.0f}")
row(f"sessiond on PostgreSQL appends/s, {clients} clients on {clients} sessions, every second an answer with model and usage", "sessiond_pg_turns_ops", "{:.0f}")
row(f"baseline sessiond on PostgreSQL appends/s, {clients} clients on {clients} sessions", "baseline_pg_ops", "{:.0f}")
row(f"baseline sessiond on PostgreSQL streamed appends/s, {clients} clients on {clients} sessions", "baseline_pg_stream_ops", "{:.0f}")
row(f"PostgreSQL WAL bytes per INSERT, {clients} clients", "pg_wal_bytes", "{:.0f}")
row(f"sessiond on PostgreSQL WAL bytes per append, {clients} clients", "sessiond_pg_wal_bytes", "{:.0f}")
row(f"sessiond on PostgreSQL WAL bytes per streamed append, {clients} clients", "sessiond_pg_stream_wal_bytes", "{:.0f}")
row(f"sessiond on PostgreSQL WAL bytes per append, {clients} clients, every second an answer", "sessiond_pg_turns_wal_bytes", "{:.0f}")
row(f"baseline sessiond on PostgreSQL WAL bytes per append, {clients} clients", "baseline_pg_wal_bytes", "{:.0f}")
row(f"baseline sessiond on PostgreSQL WAL bytes per streamed append, {clients} clients", "baseline_pg_stream_wal_bytes", "{:.0f}")
row(f"sessiond append p50 at {clients} clients (ms)", "sessiond_16c_p50_ms")
row(f"sessiond streamed append p50 at {clients} clients (ms)", "sessiond_stream_16c_p50_ms")
row(f"Redis RPUSH p50 at {clients} clients (ms)", "redis_16c_p50_ms")
row(f"PostgreSQL mean latency at {clients} clients (ms)", "pg_16c_avg_ms")
row(f"sessiond on PostgreSQL append p50 at {clients} clients (ms)", "sessiond_pg_16c_p50_ms")
row(f"sessiond on PostgreSQL streamed append p50 at {clients} clients (ms)", "sessiond_pg_stream_16c_p50_ms")
row(f"sessiond mean appends per flush, {clients} clients", "sessiond_16c_batch", "{:.1f}")
row(f"sessiond mean appends per flush, {clients} clients, streamed", "sessiond_stream_16c_batch", "{:.1f}")
row(f"CPU per append, whole machine, {clients} clients: sessiond (us)", "sessiond_cpu_us", "{:.0f}")
row(f"CPU per append, whole machine, {clients} clients: sessiond streamed (us)", "sessiond_stream_cpu_us", "{:.0f}")
row(f"CPU per RPUSH, whole machine, {clients} clients: Redis (us)", "redis_cpu_us", "{:.0f}")
row(f"CPU per INSERT, whole machine, {clients} clients: PostgreSQL (us)", "pg_cpu_us", "{:.0f}")
row(f"CPU per append, whole machine, {clients} clients: sessiond on PostgreSQL (us)", "sessiond_pg_cpu_us", "{:.0f}")
row(f"CPU per append, the daemon alone, {clients} clients: sessiond (us)", "sessiond_daemon_cpu_us", "{:.0f}")
row(f"CPU per append, the daemon alone, {clients} clients: sessiond streamed (us)", "sessiond_stream_daemon_cpu_us", "{:.0f}")
row(f"CPU per append, the daemon alone, {clients} clients: sessiond on PostgreSQL (us)", "sessiond_pg_daemon_cpu_us", "{:.0f}")
row(f"CPU per append, whole machine, {clients} clients: sessiond on PostgreSQL streamed (us)", "sessiond_pg_stream_cpu_us", "{:.0f}")
row(f"CPU per append, whole machine, {clients} clients: baseline sessiond on PostgreSQL (us)", "baseline_pg_cpu_us", "{:.0f}")
row(f"CPU per append, whole machine, {clients} clients: baseline sessiond on PostgreSQL streamed (us)", "baseline_pg_stream_cpu_us", "{:.0f}")
row(f"CPU per append, the daemon alone, {clients} clients: sessiond on PostgreSQL streamed (us)", "sessiond_pg_stream_daemon_cpu_us", "{:.0f}")
row(f"CPU per append, whole machine, {clients} clients: sessiond on PostgreSQL, every second an answer (us)", "sessiond_pg_turns_cpu_us", "{:.0f}")
row(f"CPU per append, the daemon alone, {clients} clients: sessiond on PostgreSQL, every second an answer (us)", "sessiond_pg_turns_daemon_cpu_us", "{:.0f}")
row(f"CPU per append, the daemon alone, {clients} clients: baseline sessiond on PostgreSQL (us)", "baseline_pg_daemon_cpu_us", "{:.0f}")
row(f"CPU per append, the daemon alone, {clients} clients: baseline sessiond on PostgreSQL streamed (us)", "baseline_pg_stream_daemon_cpu_us", "{:.0f}")
row(f"CPU per INSERT, PostgreSQL alone, {clients} clients: raw pgbench (us)", "pg_server_cpu_us", "{:.0f}")
row(f"CPU per append, PostgreSQL alone, {clients} clients: sessiond on PostgreSQL (us)", "sessiond_pg_server_cpu_us", "{:.0f}")
row(f"CPU per append, PostgreSQL alone, {clients} clients: sessiond on PostgreSQL streamed (us)", "sessiond_pg_stream_server_cpu_us", "{:.0f}")
row(f"CPU per append, PostgreSQL alone, {clients} clients: sessiond on PostgreSQL, every second an answer (us)", "sessiond_pg_turns_server_cpu_us", "{:.0f}")
row(f"CPU per append, PostgreSQL alone, {clients} clients: baseline sessiond on PostgreSQL (us)", "baseline_pg_server_cpu_us", "{:.0f}")
row(f"CPU per append, PostgreSQL alone, {clients} clients: baseline sessiond on PostgreSQL streamed (us)", "baseline_pg_stream_server_cpu_us", "{:.0f}")
row(f"baseline sessiond appends/s, {clients} clients on {clients} sessions", "baseline_ops", "{:.0f}")
row(f"CPU per append, whole machine, {clients} clients: baseline sessiond (us)", "baseline_cpu_us", "{:.0f}")
row(f"CPU per append, the daemon alone, {clients} clients: baseline sessiond (us)", "baseline_daemon_cpu_us", "{:.0f}")
row(f"baseline sessiond appends/s, {clients} clients on {clients} sessions, grpc-go client", "baseline_grpc_ops", "{:.0f}")
row(f"baseline sessiond mean appends per flush, {clients} clients", "baseline_16c_batch", "{:.1f}")
row(f"sessiond appends/s, {wclients} clients on {wsessions} sessions", "sessiond_wide_ops", "{:.0f}")
row(f"sessiond streamed appends/s, {wclients} clients on {wsessions} sessions", "sessiond_stream_wide_ops", "{:.0f}")
row(f"Redis appendfsync always RPUSH/s, {wclients} clients on {wsessions} keys", "redis_wide_ops", "{:.0f}")
row(f"PostgreSQL synchronous_commit on INSERT/s, {wclients} clients on {wsessions} sessions", "pg_wide_ops", "{:.0f}")
row(f"sessiond on PostgreSQL appends/s, {wclients} clients on {wsessions} sessions", "sessiond_pg_wide_ops", "{:.0f}")
row(f"sessiond on PostgreSQL streamed appends/s, {wclients} clients on {wsessions} sessions", "sessiond_pg_stream_wide_ops", "{:.0f}")
row(f"baseline sessiond on PostgreSQL streamed appends/s, {wclients} clients on {wsessions} sessions", "baseline_pg_stream_wide_ops", "{:.0f}")
row(f"sessiond append p50 at {wclients} clients (ms)", "sessiond_wide_p50_ms")
row(f"sessiond streamed append p50 at {wclients} clients (ms)", "sessiond_stream_wide_p50_ms")
row(f"sessiond mean appends per flush, {wclients} clients", "sessiond_wide_batch", "{:.1f}")
row("sessiond append, 1 client, p50, session of 10 messages (ms)", "sessiond_len10_p50_ms")
row(f"sessiond append, 1 client, p50, session of {nlong} messages (ms)", f"sessiond_len{nlong}_p50_ms")
row(f"load {nload}-message session (messages/s)", "load_msgs_per_s", "{:.0f}")
row(f"start-up with {nlist} sessions (s)", "startup_s", "{:.2f}")
row(f"list {nlist} sessions, first result, after start (ms)", "list_first_ms", "{:.1f}")
row(f"list {nlist} sessions, all, after start (ms)", "list_all_ms", "{:.0f}")
row(f"list {nlist} sessions, first result, 2nd listing (ms)", "list_warm_first_ms", "{:.1f}")
row(f"list {nlist} sessions, all, 2nd listing (ms)", "list_warm_all_ms", "{:.0f}")
row(f"RSS with {nlist} sessions, after listing them (MiB)", "list_rss_mib", "{:.0f}")
row(f"start-up with {nlist} sessions after kill -9 under write load (s)", "startup_kill_s", "{:.2f}")
row("start-up of an empty daemon, same rounds (s)", "startup_empty_s", "{:.2f}")

def get(k):
    return med.get(k, float("nan"))

print()
print("| target | measured (medians) | met |")
print("|---|---|---|")
floor = get("fsync_p50_ms") + get("health_p50_ms")
ratio = get("sessiond_1c_p50_ms") / floor
print(f"| 1-client append p50 <= 1.5 x floor ({get('fsync_p50_ms'):.3f} + {get('health_p50_ms'):.3f} = {floor:.3f} ms) | {get('sessiond_1c_p50_ms'):.3f} ms = {ratio:.2f} x | {'yes' if ratio <= 1.5 else 'NO'} |")
for other, key, need in (("Redis", "redis_ops", 1.0), ("PostgreSQL", "pg_ops", 2.0)):
    q = get("sessiond_ops") / get(key)
    print(f"| {clients} clients on {clients} sessions: appends/s >= {need:.1f} x {other} | {get('sessiond_ops'):.0f} vs {get(key):.0f} = {q:.2f} x | {'yes' if q >= need else 'NO'} |")
for other, key, need in (("Redis", "redis_wide_ops", 1.0), ("PostgreSQL", "pg_wide_ops", 2.0)):
    q = get("sessiond_wide_ops") / get(key)
    print(f"| {wclients} clients on {wsessions} sessions: appends/s >= {need:.1f} x {other} | {get('sessiond_wide_ops'):.0f} vs {get(key):.0f} = {q:.2f} x | {'yes' if q >= need else 'NO'} |")
if "sessiond_stream_ops" in med:
    ratio = get("sessiond_stream_1c_p50_ms") / floor
    print(f"| 1-client streamed append p50 <= 1.2 x floor ({floor:.3f} ms) | {get('sessiond_stream_1c_p50_ms'):.3f} ms = {ratio:.2f} x | {'yes' if ratio <= 1.2 else 'NO'} |")
    for label, key, other, okey, need in (
            (f"{clients} clients on {clients} sessions: streamed", "sessiond_stream_ops", "Redis", "redis_ops", 1.0),
            (f"{clients} clients on {clients} sessions: unary", "sessiond_ops", "Redis", "redis_ops", 0.75),
            (f"{clients} clients on {clients} sessions: streamed", "sessiond_stream_ops", "PostgreSQL", "pg_ops", 2.0),
            (f"{wclients} clients on {wsessions} sessions: streamed", "sessiond_stream_wide_ops", "Redis", "redis_wide_ops", 1.0)):
        q = get(key) / get(okey)
        print(f"| {label} appends/s >= {need:.2f} x {other} | {get(key):.0f} vs {get(okey):.0f} = {q:.2f} x | {'yes' if q >= need else 'NO'} |")
    q = get("sessiond_stream_daemon_cpu_us") / get("sessiond_daemon_cpu_us")
    print(f"| daemon CPU per append, {clients} clients: streamed <= 0.6 x unary | {get('sessiond_stream_daemon_cpu_us'):.0f} vs {get('sessiond_daemon_cpu_us'):.0f} us = {q:.2f} x | {'yes' if q <= 0.6 else 'NO'} |")
q = get(f"sessiond_len{nlong}_p50_ms") / get("sessiond_len10_p50_ms")
print(f"| append p50 at {nlong} messages <= 1.2 x at 10 | {get(f'sessiond_len{nlong}_p50_ms'):.3f} vs {get('sessiond_len10_p50_ms'):.3f} ms = {q:.2f} x | {'yes' if q <= 1.2 else 'NO'} |")
for label, key, need in (("streamed", "sessiond_pg_stream_ops", 0.7), ("unary", "sessiond_pg_ops", 0.5)):
    if key in med:
        q = get(key) / get("pg_ops")
        print(f"| sessiond on PostgreSQL, {clients} clients, {label} appends/s >= {need} x raw PostgreSQL INSERT/s | {get(key):.0f} vs {get('pg_ops'):.0f} = {q:.2f} x | {'yes' if q >= need else 'NO'} |")
if "sessiond_pg_stream_wide_ops" in med:
    q = get("sessiond_pg_stream_wide_ops") / get("pg_wide_ops")
    print(f"| sessiond on PostgreSQL, {wclients} clients on {wsessions} sessions, streamed appends/s >= 0.7 x raw PostgreSQL INSERT/s | {get('sessiond_pg_stream_wide_ops'):.0f} vs {get('pg_wide_ops'):.0f} = {q:.2f} x | {'yes' if q >= 0.7 else 'NO'} |")
if "sessiond_pg_wal_bytes" in med:
    q = get("sessiond_pg_wal_bytes") / get("pg_wal_bytes")
    print(f"| sessiond on PostgreSQL WAL bytes per {size} B append <= 2 x PostgreSQL's per INSERT | {get('sessiond_pg_wal_bytes'):.0f} vs {get('pg_wal_bytes'):.0f} = {q:.2f} x | {'yes' if q <= 2 else 'NO'} |")
f, a = get("list_first_ms"), get("list_all_ms")
print(f"| list {nlist}: first < 50 ms, all < 0.5 s | first {f:.1f} ms, all {a:.0f} ms | {'yes' if f < 50 and a < 500 else 'NO'} |")
s = get("startup_s")
print(f"| ready within 2 s with {nlist} sessions | {s:.2f} s | {'yes' if s < 2 else 'NO'} |")
k = get("startup_kill_s")
print(f"| ready within 2 s with {nlist} sessions after kill -9 under write load | {k:.2f} s (an empty daemon: {get('startup_empty_s'):.2f} s) | {'yes' if k < 2 else 'NO'} |")
if "baseline_daemon_cpu_us" in med:
    q = get("sessiond_daemon_cpu_us") / get("baseline_daemon_cpu_us")
    print(f"| daemon CPU per append, {clients} clients, >= 25% below the baseline's | {get('sessiond_daemon_cpu_us'):.0f} vs {get('baseline_daemon_cpu_us'):.0f} us = {q:.2f} x | {'yes' if q <= 0.75 else 'NO'} |")
l = get("load_msgs_per_s")
print(f"| load {nload} messages >= 100,000 messages/s | {l:.0f}/s | {'yes' if l >= 100000 else 'NO'} |")
EOF
} | tee "$work/table.md"

if [[ -n $REPORT ]]; then
	# What follows the keep marker in the old page is written by hand: kept.
	keep='<!-- scripts/bench-compare.sh keeps what follows this line when it rewrites the page -->'
	kept=""
	if [[ -f $REPORT ]]; then
		kept=$(sed -n "\|^$keep\$|,\$p" "$REPORT")
	fi
	{
		write_report "$work/table.md"
		if [[ -n $kept ]]; then
			echo
			printf '%s\n' "$kept"
		fi
	} >"$REPORT.tmp"
	mv "$REPORT.tmp" "$REPORT"
	log "wrote $REPORT"
fi
