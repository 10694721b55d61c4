#!/usr/bin/env bash
# demo.sh: the README's first command.  Installs what is missing of the
# server, its headers and a compiler (not the test suite's tools), builds and
# installs dlock, starts a throwaway cluster with dlock preloaded, and shows
#  1. two workers contending for one resource: each takes the lock (saying
#     when it has to wait, and for whom), does a fenced write, releases; the
#     fences only ever go up;
#  2. why fences matter: a holder pauses past its lease (a GC pause, a
#     SIGSTOP), a waiter takes over when the lease ends, and when the stale
#     holder wakes up and tries its write, assert_fence refuses it.
# The cluster is removed at the end.  `bash test/demo.sh --cluster` is the
# part that runs as the unprivileged user (it expects dlock installed).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

if [ "${1:-}" != --cluster ]; then
    . test/lib.sh
    install_packages "$DEMO_PACKAGES"
    build_and_install
    run_as_tester "$top" 'bash test/demo.sh --cluster'
    exit
fi

# ---- as the unprivileged user ----
export PATH=/usr/lib/postgresql/${DLOCK_PG_MAJOR:-15}/bin:$PATH
dir=$(mktemp -d /tmp/dlock-demo.XXXXXX)
port=$((20000 + RANDOM % 20000))
trap 'pg_ctl -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
# --no-locale: the cluster does not depend on the caller's LANG (a locale
# that is set but not generated makes a plain initdb fail).
initdb -D "$dir/data" -A trust --no-locale -E UTF8 >/dev/null
cat >> "$dir/data/postgresql.conf" <<CONF
shared_preload_libraries = 'dlock'
port = $port
listen_addresses = ''
unix_socket_directories = '$dir'
CONF
pg_ctl -D "$dir/data" -l "$dir/log" -w start >/dev/null
export PGHOST=$dir PGPORT=$port PGDATABASE=postgres
psql -qX -P pager=off -c "CREATE EXTENSION dlock" -c "CREATE TABLE report (run serial, worker text, fence bigint)"

t0=$(date +%s.%N)
# say TEXT: print TEXT after the seconds since the start.
say() {
    printf '%6.2fs  %s\n' "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$*"
}
# q ARGS: psql, unaligned, tuples only (SQL with :variables comes on stdin).
q() { psql -qAtX -P pager=off "$@"; }

echo "Cluster up on port $port with dlock preloaded."
echo
echo "1. Two workers contend for resource nightly-report (lease 10s):"
# worker NAME: four rounds of take the lock (wait if busy), fenced write, release.
worker() {
    local w=$1 fence holder
    for _ in 1 2 3 4; do
        fence=$(q -v w="$w" <<< "SELECT dlock.try_lock('nightly-report', :'w', '10s')")
        if [ -z "$fence" ]; then
            holder=$(q -c "SELECT holder || ' (fence ' || fence || ')' FROM dlock.locks WHERE resource = 'nightly-report'")
            say "worker $w waits: nightly-report is held by ${holder:-another worker}"
            fence=$(q -v w="$w" <<< "SELECT dlock.lock('nightly-report', :'w', '10s')")
        fi
        say "worker $w holds nightly-report with fence $fence"
        q -v w="$w" -v f="$fence" >/dev/null <<'SQL'
BEGIN;
SELECT dlock.assert_fence('nightly-report', :f);
INSERT INTO report (worker, fence) VALUES (:'w', :f);
SELECT pg_sleep(0.2);
COMMIT;
SELECT dlock.unlock('nightly-report', :'w');
SQL
    done
}
worker A & worker B & wait
echo
echo "The fenced writes, in the order they committed:"
psql -X -P pager=off -c "SELECT run, worker, fence, fence > lag(fence) OVER (ORDER BY run) AS above_previous FROM report ORDER BY run"

echo "2. A stale holder: worker A takes nightly-report with a 2s lease, then pauses"
echo "   for 4s (a GC pause, SIGSTOP, a network partition) before its write."
t0=$(date +%s.%N)
fa=$(q -c "SELECT dlock.lock('nightly-report', 'A', '2s')")
say "worker A holds nightly-report with fence $fa, lease 2s; A pauses"
(
    sleep 4
    say "worker A wakes up, still believes it holds the lock, writes with fence $fa:"
    if out=$(q -v f="$fa" 2>&1 <<'SQL'
\set ON_ERROR_STOP on
BEGIN;
SELECT dlock.assert_fence('nightly-report', :f);
INSERT INTO report (worker, fence) VALUES ('A (stale)', :f);
COMMIT;
SQL
    ); then
        say "  the stale write went through (it must not)"
    else
        say "  refused: $(echo "$out" | sed -n 's/.*ERROR: *//p' | head -n 1)"
    fi
) &
stale=$!
(
    sleep 0.3
    say "worker B asks for nightly-report and waits (lock(), up to 30s)"
    fb=$(q -c "SELECT dlock.lock('nightly-report', 'B', '10s', '30s')")
    say "worker B holds nightly-report with fence $fb: took over when A's lease ended"
    q -v f="$fb" >/dev/null <<'SQL'
BEGIN;
SELECT dlock.assert_fence('nightly-report', :f);
INSERT INTO report (worker, fence) VALUES ('B', :f);
COMMIT;
SQL
    say "worker B wrote with fence $fb"
) &
taker=$!
# Meanwhile, what the database sees, every half second.
for _ in 1 2 3 4 5 6; do
    sleep 0.5
    say "  seen: $(q -c "SELECT coalesce((SELECT 'held by ' || holder || ', fence ' || fence
                || CASE WHEN expired THEN ', lease expired'
                        ELSE ', lease ends in ' || round(extract(epoch FROM expires_at - clock_timestamp())::numeric, 1) || 's' END
                   FROM dlock.locks WHERE resource = 'nightly-report'), 'free')
              || '; waiting: ' || coalesce((SELECT string_agg(holder, ', ') FROM dlock.waiters
                                            WHERE resource = 'nightly-report'), 'nobody')")"
done
wait "$taker" "$stale"
q -c "SELECT dlock.unlock('nightly-report', 'B')" >/dev/null
echo
echo "The last writes: A's stale write is not there, B's is."
psql -X -P pager=off -c "SELECT run, worker, fence FROM report ORDER BY run DESC LIMIT 2"
psql -X -P pager=off -c "SELECT acquired, released, waits, wakeups, timeouts FROM dlock.stats()"
