#!/usr/bin/env bash
# bench/cpu.sh: server CPU per uncontended lock+unlock pair, by method.
#
#   bench/cpu.sh PGDATA [PAIRS]        (as root or the cluster's owner)
#
# Runs PAIRS (default 20000) pairs of each method from one pgbench client
# (-M prepared, one resource per method, as bench/pairs.c does) against the
# running cluster in PGDATA, and reads the CPU time of all its processes
# from /proc before and after: the postmaster's children still running and,
# through the postmaster's cutime/cstime, those that exited.  Prints a
# markdown table: microseconds of server CPU per pair (clock ticks, so
# +-0.5 us at 20000 pairs), and pairs per second.  "2 x SELECT 1" is the
# floor every method pays: two round trips through the protocol.
set -euo pipefail
data=${1:?usage: bench/cpu.sh PGDATA [PAIRS]}
n=${2:-20000}
pm=$(sed -n 1p "$data/postmaster.pid")
port=$(sed -n 4p "$data/postmaster.pid")
sock=$(sed -n 5p "$data/postmaster.pid")
bin=$(dirname "$(readlink -f "/proc/$pm/exe")")
hz=$(getconf CLK_TCK)
dir=$(mktemp -d /tmp/dlock-cpu.XXXXXX)
trap 'rm -rf "$dir"' EXIT

cat >"$dir/dlock.sql" <<'EOF'
SELECT dlock.try_lock('cpu/1', 'bench-cpu', '30s');
SELECT dlock.unlock('cpu/1', 'bench-cpu');
EOF
cat >"$dir/advisory.sql" <<'EOF'
SELECT pg_advisory_lock(424242);
SELECT pg_advisory_unlock(424242);
EOF
cat >"$dir/naive.sql" <<'EOF'
INSERT INTO naive VALUES ('cpu/1', 'bench-cpu', now() + '30s') ON CONFLICT (resource) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at WHERE naive.expires_at < now();
DELETE FROM naive WHERE resource = 'cpu/1' AND holder = 'bench-cpu';
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
psql() { "$bin/psql" -X -q -h "$sock" -p "$port" -U postgres -d postgres "$@"; }
psql -c "CREATE TABLE IF NOT EXISTS naive (resource text PRIMARY KEY, holder text, expires_at timestamptz)"

echo "| method | server CPU per pair | pairs/s (1 client) |"
echo "|---|---|---|"
for m in dlock advisory naive select; do
    "$bin/pgbench" -n -M prepared -c 1 -t 500 -f "$dir/$m.sql" -h "$sock" -p "$port" -U postgres postgres >/dev/null 2>&1
    a=$(ticks)
    t0=$(date +%s%N)
    "$bin/pgbench" -n -M prepared -c 1 -t "$n" -f "$dir/$m.sql" -h "$sock" -p "$port" -U postgres postgres >/dev/null
    t1=$(date +%s%N)
    sleep 0.3    # the backend has exited and been reaped
    b=$(ticks)
    name=$m; [ "$m" = select ] && name="2 x SELECT 1"
    echo "| $name | $(( (b - a) * 1000000 / hz / n )) us | $(( n * 1000000000 / (t1 - t0) )) |"
done
