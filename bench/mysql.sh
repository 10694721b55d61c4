#!/usr/bin/env bash
# bench/mysql.sh: dlock's MySQL and MariaDB edition against the naive MySQL
# lock table (INSERT ... ON DUPLICATE KEY UPDATE + DELETE) and
# GET_LOCK/RELEASE_LOCK, in the same run on the same throwaway MariaDB:
# uncontended lock+unlock pairs per second at 1 and 8 clients.
#
#   bench/mysql.sh [--quick] [RESULTS_DIR]     (called by bench/run.sh)
#
# Starts mariadbd on a private datadir and socket in a temporary directory
# (InnoDB defaults: innodb_flush_log_at_trx_commit = 1, so every
# acquisition is flushed at commit, as in the naive table), installs
# mysql/dlock.sql, runs bench/mysql_pairs.pl, writes RESULTS_DIR/mysql.md
# and stops the server.  As root it runs as user "postgres" (mariadbd must
# not run as root here).  Skips quietly when mariadbd is not installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
quick=""
resdir=""
for arg in "$@"; do
    case "$arg" in
        --quick) quick=1 ;;
        *) resdir=$arg ;;
    esac
done
resdir=${resdir:-$here/results${quick:+/quick}}
# mariadbd is in /usr/sbin, which Debian leaves out of other users' PATH.
case ":$PATH:" in *:/usr/sbin:*) ;; *) export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin ;; esac
command -v mariadbd >/dev/null 2>&1 || { echo "==> mariadbd not installed: MySQL edition benchmark skipped" >&2; exit 0; }
sql=""
for f in "$here/../mysql/dlock.sql" "$here/mysql-dlock.sql"; do
    [ -f "$f" ] && { sql=$f; break; }
done
[ -n "$sql" ] || { echo "mysql/dlock.sql not found" >&2; exit 1; }

tmp=$(mktemp -d /tmp/dlock-bench-my.XXXXXX)
cp "$sql" "$tmp/dlock.sql"
cp "$here/mysql_pairs.pl" "$tmp"/
mkdir -p "$resdir"
if [ "$(id -u)" -eq 0 ]; then
    chown -R postgres: "$tmp"
    chmod 755 "$tmp"
    run=(runuser -u postgres --)
else
    run=()
fi
pid=""
cleanup() {
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    rm -rf "$tmp"
}
trap cleanup EXIT

echo "==> MariaDB in $tmp" >&2
"${run[@]}" mariadb-install-db --no-defaults --datadir="$tmp/data" --user="$( [ "$(id -u)" -eq 0 ] && echo postgres || id -un)" \
    --auth-root-authentication-method=normal --skip-test-db >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; exit 1; }
"${run[@]}" mariadbd --no-defaults --datadir="$tmp/data" --socket="$tmp/sock" --skip-networking \
    --log-error="$tmp/error.log" --pid-file="$tmp/pid" --innodb-buffer-pool-size=128M \
    --max-connections=100 --event-scheduler=ON &
pid=$!
for _ in $(seq 1 300); do
    mariadb --no-defaults -uroot -S "$tmp/sock" -e 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.1
done
my() { mariadb --no-defaults -uroot -S "$tmp/sock" "$@"; }
my < "$tmp/dlock.sql" >/dev/null
my -e "CREATE DATABASE bench; CREATE USER bench@localhost IDENTIFIED BY 'bench';
       GRANT ALL ON bench.* TO bench@localhost;
       CREATE TABLE bench.naive (resource VARCHAR(255) PRIMARY KEY, holder VARCHAR(255) NOT NULL,
                                 expires_at DATETIME(6) NOT NULL) ENGINE = InnoDB;"
secs=10
[ -n "$quick" ] && secs=2
version=$(my -N -e 'SELECT VERSION()')
out=$tmp/pairs.txt
: >"$out"
for clients in 1 8; do
    for method in dlock naive getlock; do
        echo "==> MySQL edition: $method, $clients client(s), ${secs}s" >&2
        "${run[@]}" perl "$tmp/mysql_pairs.pl" "$tmp/sock" "$method" "$clients" "$secs" >>"$out"
    done
done
{
    echo "# MySQL and MariaDB edition: uncontended pairs ($(date -u +%Y-%m-%d), MariaDB $version, ${secs}s per run)"
    echo
    echo "Each client: its own connection and resource, lock then unlock, as fast as it can (Perl DBD::MariaDB,"
    echo "autocommit, innodb_flush_log_at_trx_commit = 1). pairs/s, pair latency p50 / p99 in us; failures must be 0."
    echo
    echo "| method | clients | pairs/s | p50 us | p99 us | failed | vs naive table |"
    echo "|---|---|---|---|---|---|---|"
    awk '{ r[$1" "$2] = $3; line[NR] = $0 }
         END { for (i = 1; i <= NR; i++) { split(line[i], f, " ");
               printf "| %s | %s | %s | %s | %s | %s | %.2fx |\n", f[1], f[2], f[3], f[4], f[5], f[6], f[3] / r["naive " f[2]] } }' "$out"
} >"$resdir/mysql.md"
cat "$resdir/mysql.md"
