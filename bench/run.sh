#!/usr/bin/env bash
# bench/run.sh: the one command that runs dlock's benchmark (BENCHMARKS.md).
#
#   bench/run.sh [--quick] [--only LIST]
#
# Builds bench/dlock_bench, starts a throwaway PostgreSQL cluster (initdb in
# a temporary directory, shared_preload_libraries = 'dlock', fsync and
# synchronous_commit on, a Unix socket in that directory and a random free
# TCP port on 127.0.0.1), creates the extension, starts a throwaway
# redis-server for the reference figures when one is installed, runs the
# measurements with progress on stderr, writes bench/results/ (results.md,
# raw CSV, PNG plots made with gnuplot, installed with apt-get if missing,
# as redis-server is,
# and the server log), then stops everything and removes the temporary
# directory.
#
# --quick is a smoke run of a few seconds; its results go to
# bench/results/quick/ so they never overwrite a full run's.  --only LIST
# (comma-separated: pairs,hot,release,takeover,idle,scale,elect,shared,entities,
# sessions) runs only those measurements, into bench/results/only/ (with
# --quick: bench/results/quick/).
#
# sessions (issue 36) runs on the C extension when it has dlock.open_session
# (else it says it is skipped), then on the portable edition (portable/dlock.sql
# in database portable_bench, as below, fsync on): portable_sessions/sessions.md,
# appended to results.md.
#
# For the leader election measurement it runs the dlock CLI built in cli/
# (else the one on PATH) and, when etcd and etcdctl are installed, starts a
# throwaway single-node etcd on 127.0.0.1 (random ports, data in the
# temporary directory) for the `etcdctl elect` baseline, stopped at the end.
#
# The fsync = off pass also measures the portable edition (portable/dlock.sql
# in a database of its own, installed by its non-superuser owner) against the
# naive lock table (bench/portable_pairs.pl, fsync_off/portable.md), and
# where its pair's time goes (bench/portable_cost.sh, fsync_off/portable_cost.md).
#
# PostgreSQL refuses to run as root: as root the work is done as user
# "postgres" on a copy of bench/ in /tmp (like test/lib.sh), and the
# results are copied back.  dlock itself must be built and installed
# (make && make install in the top directory).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
quick=""
only=""
inner=0
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick="--quick" ;;
        --only) [ $# -ge 2 ] || { echo "usage: bench/run.sh [--quick] [--only LIST]" >&2; exit 2; }
                only=$2; shift ;;
        --inner) inner=1 ;;          # internal: the unprivileged half
        -h|--help) sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: bench/run.sh [--quick] [--only LIST]" >&2; exit 2 ;;
    esac
    shift
done
sub="results${quick:+/quick}"
[ -z "$quick" ] && [ -n "$only" ] && sub="results/only"
resdir="$here/$sub"
PG_CONFIG=${PG_CONFIG:-pg_config}
PG_BIN=$("$PG_CONFIG" --bindir)

# say: a progress line of this script.
say() { echo "==> $*" >&2; }

# as_root: run a command as root (sudo when we are not root).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# free_port: a random TCP port nobody listens on.
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
            echo "$p"; return
        fi
    done
}

# prepare: everything that may need root: gnuplot, redis-server, the build,
# checks.
prepare() {
    . "$here/../test/apt.sh"    # apt_get: waits for another process's dpkg or apt lock
    if ! command -v gnuplot >/dev/null 2>&1; then
        say "installing gnuplot-nox for the plots"
        apt_get install -y -qq \
            --no-install-recommends gnuplot-nox >/dev/null 2>&1 ||
            say "could not install gnuplot: plots will be skipped"
    fi
    if ! command -v redis-server >/dev/null 2>&1; then
        say "installing redis-server for the Redis reference"
        apt_get install -y -qq \
            --no-install-recommends redis-server >/dev/null 2>&1 ||
            say "could not install redis-server: the Redis reference will be skipped"
        # Debian starts a system-wide redis-server; the benchmark starts its own.
        as_root systemctl disable --now redis-server >/dev/null 2>&1 || true
    fi
    if [ ! -f "$("$PG_CONFIG" --sharedir)/extension/dlock.control" ]; then
        echo "dlock is not installed: run 'make && make install' in $(dirname "$here")" >&2
        exit 1
    fi
    say "building bench/dlock_bench"
    make -s -C "$here" PG_CONFIG="$PG_CONFIG"
    DLOCK_BENCH_NOTE=$(extension_note)
    export DLOCK_BENCH_NOTE
}

# extension_note: which dlock the cluster will load (for results.md).
extension_note() {
    local top so head dirty="" match="differs from"
    top=$(dirname "$here")
    so="$("$PG_CONFIG" --pkglibdir)/dlock.so"
    head=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo "?")
    [ -n "$(git -C "$top" status --porcelain -- src sql 2>/dev/null)" ] && dirty=" + uncommitted src/sql changes"
    cmp -s "$so" "$top/dlock.so" 2>/dev/null && match="is"
    echo "installed $so $match the one built in $top (HEAD $head$dirty), md5 $(md5sum <"$so" | cut -c1-12)"
}

# portable_pairs: the portable edition (portable/dlock.sql, installed in
# database portable_bench by its owner, bench_dbo, no superuser) against the
# naive lock table in that database and the C extension, uncontended pairs
# at 1 and 8 clients (bench/portable_pairs.pl), in the fsync = off pass;
# writes fsync_off/portable.md.  Goal: portable >= 0.8x naive at 1 client.
portable_pairs() {
    local secs=10 out="$resdir/fsync_off/portable.txt" c m
    portable_install || { say "portable/dlock.sql not found: the portable edition's pairs are skipped"; : >"$resdir/fsync_off/portable.md"; return 0; }
    [ -n "$quick" ] && secs=2
    say "the portable edition's uncontended pairs (fsync = off)"
    : >"$out"
    for c in 1 8; do
        for m in naive portable dlock; do
            perl "$here/portable_pairs.pl" "$conninfo" postgres portable_bench bench_dbo "$m" "$c" "$secs" >>"$out"
        done
    done
    {
        echo "### The portable edition (fsync = off)"
        echo
        echo "Each client: its own connection and resource, try_lock then unlock, as fast as it can (Perl"
        echo "DBD::Pg, server-side prepared, autocommit; \`bench/portable_pairs.pl\`): the portable edition"
        echo "(database portable_bench, installed by its owner), the naive lock table of measurement 1 in the"
        echo "same database, and the C extension. pairs/s, pair latency p50 / p99 in us; failures must be 0."
        echo "Goal: portable >= 0.8x naive at 1 client."
        echo
        echo "| method | clients | pairs/s | p50 us | p99 us | failed | vs naive table |"
        echo "|---|---|---|---|---|---|---|"
        awk '{ r[$1" "$2] = $3; line[NR] = $0 }
             END { for (i = 1; i <= NR; i++) { split(line[i], f, " ");
                   printf "| %s | %s | %s | %s | %s | %s | %.2fx |\n", f[1], f[2], f[3], f[4], f[5], f[6], f[3] / r["naive " f[2]] } }' "$out"
    } >"$resdir/fsync_off/portable.md"
}

# portable_install: a fresh database portable_bench, owned by bench_dbo (no
# superuser), with portable/dlock.sql installed by it; fails when there is no
# portable/dlock.sql.
portable_install() {
    local sql=""
    for f in "$here/../portable/dlock.sql" "$here/portable/dlock.sql"; do
        [ -f "$f" ] && { sql=$f; break; }
    done
    [ -n "$sql" ] || return 1
    "$PG_BIN/psql" -X -q -P pager=off -d "$conninfo" -c "DROP DATABASE IF EXISTS portable_bench" \
        -c "DROP ROLE IF EXISTS bench_dbo" -c "CREATE ROLE bench_dbo LOGIN" \
        -c "CREATE DATABASE portable_bench OWNER bench_dbo" >/dev/null
    "$PG_BIN/psql" -X -q -d "$conninfo" -c "GRANT CREATE ON SCHEMA public TO bench_dbo" >/dev/null
    "$PG_BIN/psql" -X -q -d "host=$tmp port=$port user=bench_dbo dbname=portable_bench" -f "$sql" >/dev/null
}

# portable_sessions: measurement 9 (sessions) on the portable edition,
# dlock_bench --portable in portable_bench (fsync on, as the main run); writes
# portable_sessions/ and appends its sessions.md to results.md.  Skipped when
# the portable edition has no dlock.open_session.
portable_sessions() {
    local d="$resdir/portable_sessions"
    mkdir -p "$d"
    find "$d" -maxdepth 1 -type f -delete
    portable_install || { say "portable/dlock.sql not found: the portable edition's sessions are skipped"; return 0; }
    say "sessions on the portable edition (dlock_bench --portable --only sessions)"
    "$here/dlock_bench" -d "host=$tmp port=$port user=bench_dbo dbname=portable_bench" -o "$d" \
        --portable --only sessions $quick || { say "the portable edition's sessions failed"; return 1; }
    if [ -s "$d/sessions.md" ]; then
        { echo; echo "# The portable edition"; echo; cat "$d/sessions.md"; } >>"$resdir/results.md"
    fi
}

# portable_cost: where a portable pair's time goes (bench/portable_cost.sh:
# the server's time per pair of the naive table, the floor of a
# function-based lock, the floor plus each part of the fast path, and
# dlock's pair), in portable_bench after portable_pairs; writes
# fsync_off/portable_cost.md.
portable_cost() {
    local out="$resdir/fsync_off/portable_cost.md"
    if ! "$PG_BIN/psql" -X -q -d "host=$tmp port=$port user=bench_dbo dbname=portable_bench" -Atc "SELECT dlock.version()" >/dev/null 2>&1; then
        : >"$out"
        return 0
    fi
    say "where a portable pair's time goes (bench/portable_cost.sh)"
    {
        echo "### The portable edition: where a pair's time goes (fsync = off)"
        echo
        echo "The server's time per lock+unlock pair, each call its own transaction inside one CALL (no round"
        echo "trips; \`bench/portable_cost.sh\`, variants in \`bench/portable_cost.sql\`): the naive table, the floor"
        echo "(one bare UPDATE per call in SECURITY DEFINER PL/pgSQL), the floor plus one part of the fast path,"
        echo "the floor plus never waiting, the event and the epoch (minimal), and dlock.try_lock + dlock.unlock."
        echo
        PG_BIN="$PG_BIN" bash "$here/portable_cost.sh" "host=$tmp port=$port user=bench_dbo dbname=portable_bench" \
            $([ -n "$quick" ] && echo "2 500" || echo "7 3000") || echo "(bench/portable_cost.sh failed)"
    } >"$out"
}

# run_unprivileged: as root, do the rest as "postgres" on a copy in /tmp.
copy=""
run_unprivileged() {
    copy=$(mktemp -d /tmp/dlock-bench.XXXXXX)
    trap 'rm -rf "$copy"' EXIT
    rsync -a --exclude results "$here"/ "$copy"/
    cp "$here/../mysql/dlock.sql" "$copy/mysql-dlock.sql" 2>/dev/null || true
    cp "$here/../cli/dlock" "$copy/dlock-cli" 2>/dev/null || true
    # the portable edition is dlock.sql and the files it includes (\ir)
    cp -r "$here/../portable" "$copy/portable" 2>/dev/null || true
    chown -R postgres: "$copy"
    chmod 755 "$copy"
    say "running as user postgres in $copy"
    local status=0
    (cd "$copy" && runuser -u postgres -- env PG_CONFIG="$PG_CONFIG" \
        DLOCK_BENCH_NOTE="$DLOCK_BENCH_NOTE" \
        bash "$copy/run.sh" --inner $quick ${only:+--only "$only"}) || status=$?
    mkdir -p "$resdir"
    find "$resdir" -maxdepth 1 -type f -delete
    cp "$copy/$sub"/* "$resdir"/ 2>/dev/null || true
    for d in fsync_off portable_sessions; do    # the passes' own reports
        if [ -d "$copy/$sub/$d" ]; then
            rm -rf "${resdir:?}/$d"
            cp -r "$copy/$sub/$d" "$resdir"/
        fi
    done
    if [ "$status" -ne 0 ]; then
        say "FAILED (status $status); what there is is in $resdir"
        exit "$status"
    fi
    say "results in $resdir"
}

# measure: the cluster, Redis, the benchmark, the plots (unprivileged).
tmp=""
rpid=""
epid=""
# cleanup: stop Redis, etcd and PostgreSQL, remove the temporary directory.
cleanup() {
    if [ -n "$rpid" ]; then
        kill "$rpid" 2>/dev/null || true
        wait "$rpid" 2>/dev/null || true
    fi
    if [ -n "$epid" ]; then
        kill "$epid" 2>/dev/null || true
        wait "$epid" 2>/dev/null || true
    fi
    if [ -n "$tmp" ]; then
        "$PG_BIN/pg_ctl" -D "$tmp/data" -m fast stop >/dev/null 2>&1 || true
        if [ -d "$resdir" ]; then cp "$tmp/server.log" "$resdir/server.log" 2>/dev/null || true; fi
        rm -rf "$tmp"
    fi
}
# start_etcd: a throwaway single-node etcd for the `etcdctl elect`
# baseline; sets eport (empty when etcd is not installed or did not start).
eport=""
start_etcd() {
    local pport
    if ! command -v etcd >/dev/null 2>&1 || ! command -v etcdctl >/dev/null 2>&1; then
        say "etcd/etcdctl not installed: the etcdctl elect baseline is skipped"
        return
    fi
    eport=$(free_port)
    pport=$(free_port)
    say "starting etcd on 127.0.0.1:$eport"
    etcd --name bench --data-dir "$tmp/etcd" \
        --listen-client-urls "http://127.0.0.1:$eport" \
        --advertise-client-urls "http://127.0.0.1:$eport" \
        --listen-peer-urls "http://127.0.0.1:$pport" \
        --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
        --initial-cluster "bench=http://127.0.0.1:$pport" >"$tmp/etcd.log" 2>&1 &
    epid=$!
    for _ in $(seq 1 50); do
        etcdctl --endpoints="127.0.0.1:$eport" endpoint health >/dev/null 2>&1 && return
        sleep 0.2
    done
    tail -n 5 "$tmp/etcd.log" >&2
    say "etcd did not start: the etcdctl elect baseline is skipped"
    eport=""
}

# dlock_cli: the dlock CLI to measure: the copy run_unprivileged made, the
# one built in cli/, or the one on PATH.
dlock_cli() {
    local c
    for c in "$here/dlock-cli" "$here/../cli/dlock" "$(command -v dlock 2>/dev/null)"; do
        [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }
    done
}

measure() {
    local port rport="" conninfo cli
    tmp=$(mktemp -d /tmp/dlock-bench-pg.XXXXXX)
    trap cleanup EXIT

    say "initdb in $tmp"
    "$PG_BIN/initdb" -D "$tmp/data" -A trust -U postgres -E UTF8 --locale=C --no-sync \
        >"$tmp/initdb.log" 2>&1 || { cat "$tmp/initdb.log" >&2; exit 1; }
    for attempt in 1 2 3 4 5; do
        port=$(free_port)
        cat >"$tmp/data/bench.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$tmp'
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
max_connections = 150
fsync = on
synchronous_commit = on
track_wal_io_timing = on
log_min_messages = warning
EOF
        grep -q "include 'bench.conf'" "$tmp/data/postgresql.conf" ||
            echo "include 'bench.conf'" >>"$tmp/data/postgresql.conf"
        say "starting PostgreSQL on port $port (socket in $tmp)"
        if "$PG_BIN/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 60 start >/dev/null; then
            break
        fi
        tail -n 5 "$tmp/server.log" >&2
        [ "$attempt" -eq 5 ] && { echo "could not start PostgreSQL" >&2; exit 1; }
    done
    conninfo="host=$tmp port=$port user=postgres dbname=postgres"
    "$PG_BIN/psql" -X -q -P pager=off -d "$conninfo" -c "CREATE EXTENSION dlock"

    if command -v redis-server >/dev/null 2>&1; then
        rport=$(free_port)
        say "starting redis-server on 127.0.0.1:$rport"
        redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$tmp" --loglevel warning >"$tmp/redis.log" 2>&1 &
        rpid=$!
    else
        say "redis-server not installed: the Redis reference is skipped"
    fi

    start_etcd
    cli=$(dlock_cli)
    [ -n "$cli" ] || say "no dlock CLI found: the dlock elect measurement is skipped"

    mkdir -p "$resdir"
    find "$resdir" -maxdepth 1 -type f -delete
    "$here/dlock_bench" -d "$conninfo" -o "$resdir" ${rport:+--redis-port "$rport"} $quick \
        ${only:+--only "$only"} ${cli:+--dlock-cli "$cli"} ${eport:+--etcd-endpoint "127.0.0.1:$eport"}

    # Sessions (issue 36) on the portable edition too, fsync on.
    if [ -z "$only" ] || [[ ",$only," == *,sessions,* ]]; then
        portable_sessions
    fi

    # CPU alone: the uncontended pairs again with fsync = off (WAL is still
    # written, never flushed), in the same cluster, into fsync_off/; its
    # pairs table is appended to results.md.
    if [ -z "$only" ] || [[ ",$only," == *,pairs,* ]]; then
        say "uncontended pairs with fsync = off (CPU alone)"
        "$PG_BIN/psql" -X -q -P pager=off -d "$conninfo" -c "ALTER SYSTEM SET fsync = off" -c "SELECT pg_reload_conf()" >/dev/null
        mkdir -p "$resdir/fsync_off"
        find "$resdir/fsync_off" -maxdepth 1 -type f -delete
        "$here/dlock_bench" -d "$conninfo" -o "$resdir/fsync_off" ${rport:+--redis-port "$rport"} \
            $quick --only pairs
        portable_pairs
        portable_cost
        say "server CPU per pair (bench/cpu.sh)"
        for c in 1 8; do
            bash "$here/cpu.sh" "$tmp/data" $([ -n "$quick" ] && echo 3000 || echo 20000) $c \
                >"$resdir/fsync_off/cpu_$c.md" || echo "(bench/cpu.sh failed)" >"$resdir/fsync_off/cpu_$c.md"
        done
        "$PG_BIN/psql" -X -q -P pager=off -d "$conninfo" -c "ALTER SYSTEM RESET fsync" -c "SELECT pg_reload_conf()" >/dev/null
        {
            echo
            echo "## CPU alone: uncontended pairs with fsync = off"
            echo
            echo "The same measurement in the same cluster right after, with fsync = off (WAL"
            echo "written, never flushed): what each method costs in CPU. Full report:"
            echo "fsync_off/results.md."
            awk '/^## 1\./ {on = 1; next} /^## / {on = 0} on' "$resdir/fsync_off/results.md"
            echo
            cat "$resdir/fsync_off/portable.md"
            echo
            cat "$resdir/fsync_off/portable_cost.md"
            echo
            echo "Server CPU per pair (all the cluster's processes, from /proc; \`bench/cpu.sh\`,"
            echo "one resource per pgbench client, fsync = off), and pgbench's own CPU per pair;"
            echo "1 client, then 8:"
            echo
            cat "$resdir/fsync_off/cpu_1.md"
            echo
            cat "$resdir/fsync_off/cpu_8.md"
        } >>"$resdir/results.md"
    fi

    # Per-entity locks at scale (issue 25): random resources out of a
    # thousand and out of a million, fsync off and on, 1 and 8 clients,
    # dlock against the naive table in alternating rounds, with the lock
    # table's size; appended to results.md.
    if [ -z "$only" ] || [[ ",$only," == *,entities,* ]]; then
        say "per-entity locks: random resources out of 1,000 and 1,000,000 (bench/entities.sh)"
        {
            echo
            echo "## Per-entity locks at scale (bench/entities.sh)"
            echo
            bash "$here/entities.sh" "$tmp/data" $quick || echo "(bench/entities.sh failed)"
        } >"$resdir/entities.md"
        cat "$resdir/entities.md" >>"$resdir/results.md"
    fi

    if [ -z "$only" ]; then
        bash "$here/mysql.sh" "$resdir" $quick ||    # the MySQL edition, when MariaDB is installed
            say "the MySQL edition benchmark failed"
    fi
    if [ -z "$only" ] && command -v gnuplot >/dev/null 2>&1; then
        say "plotting"
        gnuplot -e "dir='$resdir'" "$here/plots.gp" 2>"$tmp/gnuplot.log" ||
            { cat "$tmp/gnuplot.log" >&2; say "plotting failed"; }
    fi
    if grep -E "ERROR|FATAL|PANIC" "$tmp/server.log" | grep -v "canceling statement" >&2; then
        say "the server logged errors (above)"
    fi
    say "stopping PostgreSQL"
}

if [ "$inner" -eq 1 ]; then
    measure
    exit 0
fi
prepare
if [ "$(id -u)" -eq 0 ]; then
    run_unprivileged
else
    measure
    say "results in $resdir"
fi
