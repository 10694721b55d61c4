#!/usr/bin/env bash
# mysql/demo.sh: dlock's MySQL and MariaDB edition in a minute.  Installs
# MariaDB from Debian if it is missing (apt-get, through sudo unless root),
# starts a throwaway server on a private socket (as user "postgres" when run
# as root; never the system service), installs mysql/dlock.sql, and lets two
# workers contend for one resource with CALL dlock.lock: each holds it for a
# second, writes its fence, releases; the fences only grow.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
# mariadbd is in /usr/sbin, which Debian leaves out of other users' PATH.
case ":$PATH:" in *:/usr/sbin:*) ;; *) export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin ;; esac
if ! command -v mariadbd >/dev/null 2>&1; then
    . "$top/test/apt.sh"    # apt_get: waits for another process's dpkg or apt lock
    apt_get install -y -qq mariadb-server mariadb-client >/dev/null
fi
if [ "$(id -u)" -eq 0 ]; then
    copy=$(mktemp -d /tmp/dlock-mydemo.XXXXXX)
    cp -r "$top/mysql" "$top/test" "$copy"/
    chown -R postgres: "$copy"
    trap 'rm -rf "$copy"' EXIT
    runuser -u postgres -- bash "$copy/mysql/demo.sh"
    exit
fi
. "$top/test/mysql/server.sh"
dir=$(mktemp -d /tmp/dlock-mydemo-db.XXXXXX)
trap 'my_stop; rm -rf "$dir"' EXIT
my_init "$dir" 2>/dev/null
my_sql < "$top/mysql/dlock.sql" >/dev/null
echo "dlock $(my_sql -N -e 'SELECT dlock.version()') installed on a throwaway MariaDB ($MY_SOCK)"
worker() {
    local name=$1 i f
    for i in 1 2 3; do
        f=$(my_sql -N -e "CALL dlock.lock('demo/report', '$name', 10, 30)")
        echo "$(date +%T.%N | cut -c1-12) $name holds demo/report, fence $f"
        sleep 1
        my_sql -N -e "SELECT dlock.unlock('demo/report', '$name', $f)" >/dev/null
    done
}
worker alpha & a=$!
worker beta & b=$!
wait $a $b
my_sql -e "SELECT dlock.try_lock('demo/report', 'gamma', 0.5) AS fence_gamma; SELECT SLEEP(1) AS '';
           SELECT dlock.renew('demo/report', 'gamma', NULL, NULL) AS 'renew after expiry (never revived)';
           SELECT resource, holder, count, fence, expired FROM dlock.locks"
