#!/usr/bin/env bash
# demo.sh: the README's first command.  Installs what is missing, builds and
# installs dlock, starts a throwaway cluster with dlock preloaded, and shows
# two workers contending for one resource: each takes the lock, does a
# fenced write, releases; the fences printed only ever go up.  The cluster
# is removed at the end.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. test/lib.sh

install_packages
build_and_install

run_as_tester "$top" '
set -euo pipefail
export PATH=/usr/lib/postgresql/15/bin:$PATH
dir=$(mktemp -d /tmp/dlock-demo.XXXXXX)
port=$((20000 + RANDOM % 20000))
trap "pg_ctl -D $dir/data -m immediate stop >/dev/null 2>&1 || true; rm -rf $dir" EXIT
initdb -D "$dir/data" -A trust >/dev/null
cat >> "$dir/data/postgresql.conf" <<CONF
shared_preload_libraries = '"'"'dlock'"'"'
port = $port
listen_addresses = '"'"''"'"'
unix_socket_directories = '"'"'$dir'"'"'
CONF
pg_ctl -D "$dir/data" -l "$dir/log" -w start >/dev/null
export PGHOST=$dir PGPORT=$port PGDATABASE=postgres
psql -qX -c "CREATE EXTENSION dlock" -c "CREATE TABLE report (run serial, worker text, fence bigint)"
echo "Cluster up on port $port with dlock preloaded; two workers contend for resource nightly-report:"
worker() {
    for i in 1 2 3 4; do
        psql -qAtX -v w="$1" <<SQL
SELECT dlock.lock('"'"'nightly-report'"'"', :'"'"'w'"'"', '"'"'10s'"'"') AS fence \gset
\echo worker :w holds nightly-report with fence :fence
BEGIN;
SELECT dlock.assert_fence('"'"'nightly-report'"'"', :fence) \g /dev/null
INSERT INTO report (worker, fence) VALUES (:'"'"'w'"'"', :fence);
SELECT pg_sleep(0.2) \g /dev/null
COMMIT;
SELECT dlock.unlock('"'"'nightly-report'"'"', :'"'"'w'"'"') AS left \gset
SQL
    done
}
worker A & worker B & wait
echo
echo "The fenced writes, in the order they committed:"
psql -X -c "SELECT run, worker, fence, fence > lag(fence) OVER (ORDER BY run) AS above_previous FROM report ORDER BY run"
psql -X -c "SELECT acquired, released, waits, wakeups, timeouts FROM dlock.stats()"
'
