# lib.sh: shared steps of test/run-tests.sh and test/demo.sh.
# Sourced, not run.

# The PostgreSQL major to build and test against: $DLOCK_PG_MAJOR, else the
# one this Debian release ships (15 on Debian 12, 17 on 13, 18 on forky),
# else the newest installed.
debian_pg_major() {
    local codename
    codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    case $codename in
        bookworm) echo 15 ;;
        trixie) echo 17 ;;
        forky|sid) echo 18 ;;
        *) ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -n 1 ;;
    esac
}
PG_MAJOR=${DLOCK_PG_MAJOR:-$(debian_pg_major)}
PG_MAJOR=${PG_MAJOR:-15}
export DLOCK_PG_MAJOR=$PG_MAJOR
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PG_CONFIG=$PG_BIN/pg_config
# What the demo (test/demo.sh) needs: the server, its headers, a compiler
# (and rsync, for the copy of the tree that runs as "postgres").
DEMO_PACKAGES="build-essential postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR libpq-dev rsync"
# What the test suite needs besides.
# python3-sysv-ipc: tooz 9's tooz/tests/test_coordination.py imports its
# ipc driver (python3-tooz only suggests it); 020_tooz.t needs it there.
# The JDK, junit5 and the JDBC driver: the Java client's 050_java.t.
PACKAGES="$DEMO_PACKAGES
    libipc-run-perl libdbd-pg-perl pgbouncer postgresql-$PG_MAJOR-cron procps iproute2
    debhelper postgresql-server-dev-all dpkg-dev
    patroni python3-etcd etcd-server etcd-client
    mariadb-server mariadb-client libmariadb-dev libdbd-mariadb-perl
    python3-psycopg python3-tooz python3-venv python3-pip python3-setuptools python3-wheel python3-pytest
    python3-testtools python3-fixtures python3-sysv-ipc
    default-jdk-headless junit5 libpostgresql-jdbc-java
    golang-go golang-github-lib-pq-dev"
# The Go client's tests (test/clients/t/040_go.t) also run on pgx's stdlib
# driver where Debian packages it: v4 on bookworm and trixie, v5 from forky on.
case $(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") in
    bookworm|trixie) PACKAGES="$PACKAGES golang-github-jackc-pgx-v4-dev" ;;
    forky|sid) PACKAGES="$PACKAGES golang-github-jackc-pgx-v5-dev" ;;
esac
# Node.js and npm (the Node client's tests, the portable edition's server
# packages) from Debian, unless this machine has them already (a NodeSource
# nodejs bundles npm and conflicts with Debian's).
command -v npm >/dev/null || PACKAGES="$PACKAGES nodejs npm"

# A locale that is set but not generated (LANG=en_US.UTF-8 on a minimal
# image, or forwarded by ssh) makes perl, apt and bash warn at every call:
# fall back to C.UTF-8 then.  (The tests' throwaway clusters never depend on
# the locale either way: see NO_LOCALE and PROVE in the Makefile.)
if command -v locale >/dev/null && [ -n "$(locale 2>&1 >/dev/null)" ]; then
    echo "The locale ${LC_ALL:-${LANG:-}} is not generated here (see locale -a); using C.UTF-8."
    export LC_ALL=C.UTF-8 LANG=C.UTF-8    # first, so that bash has a valid locale throughout
    unset LC_CTYPE LC_COLLATE LC_MESSAGES LC_MONETARY LC_NUMERIC LC_TIME LANGUAGE LC_ALL
fi

# Debian gives users other than root a PATH without the sbin directories,
# where mariadbd and pgbouncer are: add them.
case ":$PATH:" in *:/usr/sbin:*) ;; *) export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin ;; esac

# as_root: run a command as root (sudo when we are not root).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# apt_get: apt-get that waits for another process's dpkg or apt lock.
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"

# install_packages [LIST]: apt-get install whatever of LIST (default
# $PACKAGES, the test suite's; the demo passes $DEMO_PACKAGES) is missing.
install_packages() {
    local missing=()
    for p in ${1:-$PACKAGES}; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "Installing: ${missing[*]} (apt-get, a minute or two)"
        apt_get update -q
        # -q: one line per package fetched, unpacked and set up
        apt_get install -y -q --no-install-recommends "${missing[@]}"
    fi
}

# build_and_install [MAKE ARGS]: build the extension and the CLI, install
# both (run-tests.sh passes WERROR=1).
build_and_install() {
    make -s PG_CONFIG="$PG_CONFIG" "$@"
    as_root make -s install PG_CONFIG="$PG_CONFIG" "$@"
}

# run_as_tester DIR SCRIPT: run SCRIPT with bash in DIR as a user that may
# run PostgreSQL; as root that is "postgres" on a private copy of DIR
# (/tmp/dlock-test.*), removed at exit unless SCRIPT failed: then it is kept
# for its logs, and the path is printed.
run_as_tester() {
    local dir=$1 script=$2 rc=0
    if [ "$(id -u)" -eq 0 ]; then
        DLOCK_TEST_COPY=$(mktemp -d /tmp/dlock-test.XXXXXX)
        trap 'rm -rf "$DLOCK_TEST_COPY"' EXIT
        trap 'exit 130' INT TERM HUP
        rsync -a --exclude .git --exclude tmp_check --exclude tmp_check_iso "$dir"/ "$DLOCK_TEST_COPY"/
        chown -R postgres: "$DLOCK_TEST_COPY"
        chmod 755 "$DLOCK_TEST_COPY"
        (cd "$DLOCK_TEST_COPY" && runuser -u postgres -- bash -c "$script") || rc=$?
        if [ "$rc" -ne 0 ]; then
            trap - EXIT
            echo "Failed; the run's copy of the tree is kept for its logs: $DLOCK_TEST_COPY"
            echo "  (*.log, regression.diffs, output_iso/, log/, tmp_check/log/; rm -rf it when done)"
        fi
    else
        (cd "$dir" && bash -c "$script") || rc=$?
        [ "$rc" -eq 0 ] || echo "Failed; logs in $dir (*.log, regression.diffs, output_iso/, log/, tmp_check/log/)"
    fi
    return "$rc"
}
