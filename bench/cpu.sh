#!/usr/bin/env bash
# bench/cpu.sh: server CPU per uncontended lock+unlock pair, by method.
#
#   bench/cpu.sh PGDATA [PAIRS [CLIENTS]]   (as root or the cluster's owner)
#
# Runs PAIRS (default 20000) pairs of each method from CLIENTS (default 1)
# pgbench clients (-M prepared, one resource per client and method, as
# bench/pairs.c does) against the running cluster in PGDATA, and reads the
# CPU time of all its processes from /proc before and after: the
# postmaster's children still running and, through the postmaster's
# cutime/cstime, those that exited.  Prints a markdown table: microseconds
# of server CPU per pair (clock ticks, so +-0.5 us at 20000 pairs), of
# pgbench's CPU per pair (the client side: libpq, the kernel's socket work),
# and pairs per second.  "2 x SELECT 1" is the floor every method pays: two
# round trips through the protocol.
set -euo pipefail
data=${1:?usage: bench/cpu.sh PGDATA [PAIRS]}
n=${2:-20000}
clients=${3:-1}
pm=$(sed -n 1p "$data/postmaster.pid")
port=$(sed -n 4p "$data/postmaster.pid")
sock=$(sed -n 5p "$data/postmaster.pid")
bin=$(dirname "$(readlink -f "/proc/$pm/exe")")
hz=$(getconf CLK_TCK)
dir=$(mktemp -d /tmp/dlock-cpu.XXXXXX)
trap 'rm -rf "$dir"' EXIT

cat >"$dir/dlock.sql" <<'EOF'
SELECT dlock.try_lock('cpu/' || :client_id, 'bench-cpu', '30s');
SELECT dlock.unlock('cpu/' || :client_id, 'bench-cpu');
EOF
cat >"$dir/advisory.sql" <<'EOF'
SELECT pg_advisory_lock(424242 + :client_id);
SELECT pg_advisory_unlock(424242 + :client_id);
EOF
cat >"$dir/naive.sql" <<'EOF'
INSERT INTO naive VALUES ('cpu/' || :client_id, 'bench-cpu', now() + '30s') ON CONFLICT (resource) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at WHERE naive.expires_at < now();
DELETE FROM naive WHERE resource = 'cpu/' || :client_id AND holder = 'bench-cpu';
EOF
printf 'SELECT 1;\nSELECT 1;\n' >"$dir/select.sql"
chmod -R a+rX "$dir"

# ticks: CPU clock ticks of the cluster's processes so far.
ticks() {
    local t c
    t=$(awk '{print $16 + $17}' "/proc/$pm/stat")
    for c in $(ps -o pid= --ppid "$pm"); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
psql() { "$bin/psql" -X -q -P pager=off -h "$sock" -p "$port" -U postgres -d postgres "$@"; }
psql -c "CREATE TABLE IF NOT EXISTS naive (resource text PRIMARY KEY, holder text, expires_at timestamptz)"

echo "| method | server CPU per pair | pgbench CPU per pair | pairs/s ($clients client$([ "$clients" = 1 ] || echo s)) |"
echo "|---|---|---|---|"
per=$(( n / clients ))
n=$(( per * clients ))
for m in dlock advisory naive select; do
    "$bin/pgbench" -n -M prepared -c "$clients" -j "$clients" -t 500 -f "$dir/$m.sql" -h "$sock" -p "$port" -U postgres postgres >/dev/null 2>&1
    a=$(ticks)
    t0=$(date +%s%N)
    # pgbench's own CPU (user + system, in ms) from bash's times of its child.
    c0=$(awk '{print $16 + $17}' /proc/$$/stat)
    "$bin/pgbench" -n -M prepared -c "$clients" -j "$clients" -t "$per" -f "$dir/$m.sql" -h "$sock" -p "$port" -U postgres postgres >/dev/null
    c1=$(awk '{print $16 + $17}' /proc/$$/stat)
    t1=$(date +%s%N)
    sleep 0.3    # the backends have exited and been reaped
    b=$(ticks)
    name=$m; [ "$m" = select ] && name="2 x SELECT 1"
    echo "| $name | $(( (b - a) * 1000000 / hz / n )) us | $(( (c1 - c0) * 1000000 / hz / n )) us | $(( n * 1000000000 / (t1 - t0) )) |"
done
