# lib.sh: shared steps of test/run-tests.sh and test/demo.sh.
# Sourced, not run.

PG_BIN=/usr/lib/postgresql/15/bin
PACKAGES="build-essential postgresql-15 postgresql-server-dev-15 libpq-dev
    libipc-run-perl libdbd-pg-perl pgbouncer postgresql-15-cron rsync procps
    mariadb-server mariadb-client libmariadb-dev libdbd-mariadb-perl"

# as_root: run a command as root (sudo when we are not root).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# install_packages: apt-get install whatever of $PACKAGES is missing.
install_packages() {
    local missing=()
    for p in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "Installing: ${missing[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# build_and_install: build the extension and the CLI, install both.
build_and_install() {
    make -s PG_CONFIG=/usr/bin/pg_config
    as_root make -s install PG_CONFIG=/usr/bin/pg_config
}

# run_as_tester DIR SCRIPT: run SCRIPT with bash in DIR as a user that may
# run PostgreSQL; as root that is "postgres" on a private copy of DIR.
run_as_tester() {
    local dir=$1 script=$2
    if [ "$(id -u)" -eq 0 ]; then
        local copy
        copy=$(mktemp -d /tmp/dlock-test.XXXXXX)
        rsync -a --exclude .git --exclude tmp_check --exclude tmp_check_iso "$dir"/ "$copy"/
        chown -R postgres: "$copy"
        chmod 755 "$copy"
        (cd "$copy" && runuser -u postgres -- bash -c "$script")
    else
        (cd "$dir" && bash -c "$script")
    fi
}
