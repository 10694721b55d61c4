# server.sh: start and stop a throwaway MariaDB server for dlock's MySQL
# tests and benchmark.  Sourced, not run.  Runs as the current user (never
# root: as root the caller switches to an unprivileged user first), with a
# private datadir and socket under $MY_DIR and networking only on a free
# loopback port, so nothing depends on the system service.
#
#   my_init DIR [mariadbd options...]   create DIR/data, start, wait
#   my_start [mariadbd options...]      start again on the same datadir
#   my_kill9 / my_stop                  crash it / shut it down cleanly
#   my_sql [mariadb options...]         the client as root on the socket
#
# Shared state: the variables MY_DIR, MY_SOCK, MY_PORT, MY_PID of the
# sourcing shell; one server per shell.

my_free_port() {
    local p
    while :; do
        p=$((30000 + RANDOM % 20000))
        if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
            echo "$p"; return
        fi
    done
}

my_init() {
    MY_DIR=$1; shift
    MY_SOCK=$MY_DIR/mysqld.sock
    MY_PORT=$(my_free_port)
    mkdir -p "$MY_DIR"
    mariadb-install-db --no-defaults --datadir="$MY_DIR/data" --user="$(id -un)" \
        --auth-root-authentication-method=normal --skip-test-db >"$MY_DIR/install.log" 2>&1 \
        || { cat "$MY_DIR/install.log" >&2; return 1; }
    my_start "$@"
}

my_start() {
    MY_ARGS=("$@")
    mariadbd --no-defaults --datadir="$MY_DIR/data" --socket="$MY_SOCK" \
        --port="$MY_PORT" --bind-address=127.0.0.1 --pid-file="$MY_DIR/mysqld.pid" \
        --log-error="$MY_DIR/error.log" --innodb-buffer-pool-size=64M \
        --innodb-log-file-size=48M --event-scheduler=ON "$@" &
    MY_PID=$!
    local i
    for i in $(seq 1 600); do
        if mariadb --no-defaults -uroot -S "$MY_SOCK" -e 'SELECT 1' >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$MY_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "mariadbd did not start:" >&2; tail -n 20 "$MY_DIR/error.log" >&2
    return 1
}

my_sql() { mariadb --no-defaults -uroot -S "$MY_SOCK" "$@"; }

my_kill9() { kill -9 "$MY_PID" 2>/dev/null; wait "$MY_PID" 2>/dev/null || true; }

my_stop() {
    [ -n "${MY_PID:-}" ] || return 0
    kill "$MY_PID" 2>/dev/null || true
    wait "$MY_PID" 2>/dev/null || true
    MY_PID=
}
