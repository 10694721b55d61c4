#!/usr/bin/env bash
# test/valgrind.sh: the regression and isolation suites against a server
# that runs under valgrind (memcheck), every backend and worker included.
#
#   bash test/valgrind.sh          (as a user that may run PostgreSQL, with
#                                   dlock built and installed; 5-15 minutes)
#
# Debian's PostgreSQL is not built with USE_VALGRIND, so memory-context
# chunks are not tracked one by one: this finds reads of uninitialised
# memory, bad frees and overruns of malloc'd blocks, not every use after
# pfree.  PostgreSQL itself writes uninitialised padding to WAL and files;
# only errors with a dlock frame in their stack count.  Exit status 1 when
# there is one (the logs are kept and named).  A suite's failures are shown
# but do not fail this script: under valgrind every step is 20-50 times
# slower, and specs that depend on time (fair_queue's 2 s dlock.queue_ttl)
# can fail from that alone; run them normally to judge them.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }
BIN=$(pg_config --bindir)
tmp=$(mktemp -d /tmp/dlock-valgrind.XXXXXX)
port=$((20000 + RANDOM % 20000))
cleanup() { "$BIN/pg_ctl" -D "$tmp/data" -m immediate stop >/dev/null 2>&1 || true; }
trap cleanup EXIT

"$BIN/initdb" -D "$tmp/data" -A trust -U postgres -E UTF8 --no-locale --no-sync >"$tmp/initdb.log"
cat test/dlock.conf >>"$tmp/data/postgresql.conf"
cat >>"$tmp/data/postgresql.conf" <<EOF
port = $port
listen_addresses = ''
unix_socket_directories = '$tmp'
dlock.database = 'contrib_regression'
# valgrind makes everything 20-50 times slower
statement_timeout = 0
EOF
echo "== starting PostgreSQL under valgrind (logs: $tmp/vg.*.log)"
valgrind --quiet --trace-children=yes --leak-check=no --num-callers=40 \
    --error-limit=no --log-file="$tmp/vg.%p.log" \
    "$BIN/postgres" -D "$tmp/data" >"$tmp/server.log" 2>&1 &
for _ in $(seq 1 300); do
    "$BIN/pg_isready" -q -h "$tmp" -p "$port" && break
    sleep 1
done
"$BIN/pg_isready" -q -h "$tmp" -p "$port" || { tail "$tmp/server.log"; exit 1; }

status=0
opts="--host=$tmp --port=$port --user=postgres"
echo "== regression suite"
make -s installcheck-regress REGRESS_OPTS="--inputdir=test --load-extension=dlock --dbname=contrib_regression $opts" ||
    status=1
echo "== isolation suite"
make -s installcheck-isolation \
    ISOLATION_OPTS="--inputdir=test/isolation --outputdir=output_iso --load-extension=dlock --dbname=isolation_regression $opts" ||
    status=1
"$BIN/pg_ctl" -D "$tmp/data" -m fast -t 300 stop >/dev/null || true
trap - EXIT

# An error's block in a log runs from "==PID== <message>" to a blank
# "==PID==" line; keep those with a frame in dlock.so.
dlock_errors=$(awk '
    /^==[0-9]+== [^ ]/ && !inblk { inblk = 1; blk = ""; has = 0 }
    inblk { blk = blk $0 "\n"; if ($0 ~ /dlock\.so/) has = 1 }
    /^==[0-9]+== *$/ && inblk { if (has) { printf "%s", blk; n++ } inblk = 0 }
    END { exit 0 }' "$tmp"/vg.*.log)
all=$(cat "$tmp"/vg.*.log | grep -c "^==[0-9]*== [A-Z].*\(Invalid\|uninitialised\|Mismatched\)" || true)
if [ -n "$dlock_errors" ]; then
    echo "$dlock_errors" | head -200
    echo "valgrind: errors in dlock (above; logs in $tmp)"
    exit 1
fi
echo "valgrind: no error with a dlock frame ($all reports elsewhere in PostgreSQL; logs in $tmp)"
[ "$status" -eq 0 ] || echo "note: a suite had failures under valgrind (see above: timing?)"
rm -rf "$tmp"
