#!/usr/bin/env bash
# in-root.sh: run the test suite (or any command) on another Debian release,
# inside a root made with debootstrap from the same Debian registry.  CI runs
# the suite natively on Debian 12 (PostgreSQL 15) and through this script on
# Debian 13 "trixie" (PostgreSQL 17) and Debian "forky" (PostgreSQL 18).
#
#   bash test/in-root.sh [--root DIR] [--old-pg N] SUITE [COMMAND [ARGS]]
#
# SUITE is a Debian code name (bookworm, trixie, forky, ...).  The root is
# made once in DIR (default /var/cache/dlock-roots/SUITE) and reused; the
# packages the tests need are installed in it (test/lib.sh decides which,
# and which PostgreSQL major: the release's own).  This tree is copied to
# /src in the root, and COMMAND (default: bash test/run-tests.sh) runs there
# with a clean environment (pass variables through COMMAND: env
# DLOCK_GO_TESTS=... bash test/run-tests.sh ...) as root in private
# mount, PID, IPC and network namespaces: the servers the tests start see
# only their own loopback, every process they leave is killed when COMMAND
# ends, and their shared memory goes with the root's private /dev/shm.  A
# failed run's logs stay under DIR/tmp until the next.  Several roots may
# run at once.  Root only (debootstrap, chroot, unshare).
#
# --old-pg N copies this machine's PostgreSQL N (installed with apt-get if
# missing) into the root, with dlock built for it from this tree and the
# shared libraries of this machine that the root's release no longer ships
# (libicu, libldap of Debian 12), and sets DLOCK_OLD_PG_MAJOR=N: the upgrade
# tests from N (test/t/097_cross_major.pl: pg_upgrade, dump and restore)
# then run against the root's own major.  Debian ships one major per
# release, so this is how both meet on one system.
set -Eeuo pipefail
# A command that ends this script (-e) says so.
trap 'echo "in-root.sh: line $LINENO: status $? ended the run" >&2' ERR

top=$(cd "$(dirname "$0")/.." && pwd)
root= old_pg=
while [ $# -gt 0 ]; do
    case $1 in
        --root) root=$2; shift 2 ;;
        --old-pg) old_pg=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || { echo "usage: $0 [--root DIR] [--old-pg N] SUITE [COMMAND [ARGS]]" >&2; exit 2; }
suite=$1; shift
[ $# -gt 0 ] || set -- bash test/run-tests.sh
root=${root:-/var/cache/dlock-roots/$suite}
[ "$(id -u)" -eq 0 ] || { echo "$0: must run as root (debootstrap, chroot, unshare)" >&2; exit 2; }

mirror=http://deb.debian.org/debian
. "$top/test/apt.sh"    # apt_get: waits for another process's dpkg or apt lock
if ! command -v debootstrap >/dev/null || ! command -v rsync >/dev/null; then
    apt_get update -q && apt_get install -y -q --no-install-recommends debootstrap rsync
fi
if [ ! -f "$root/.dlock-root" ]; then
    # debootstrap knows a release by a script of its name; one newer than the
    # host's debootstrap (forky on Debian 12) is made like sid.
    script=/usr/share/debootstrap/scripts/$suite
    [ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
    echo "=== making a Debian $suite root in $root (debootstrap, about a minute)"
    rm -rf "$root"
    mkdir -p "$root"
    debootstrap --variant=minbase "$suite" "$root" "$mirror" "$script" > "$root.debootstrap.log" 2>&1 || {
        tail -n 30 "$root.debootstrap.log"; echo "debootstrap $suite failed" >&2; exit 1; }
    # A testing release's Release file may be past its Valid-Until date on
    # the registry (forky's is).
    echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99dlock-valid-until"
    touch "$root/.dlock-root"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

# This tree, as checked out (no build products), at /src.
mkdir -p "$root/src"
rsync -a --delete --exclude=.git --exclude=tmp_check --exclude=tmp_check_iso \
    --exclude=output_iso --exclude=results --exclude=log --exclude='*.o' --exclude='*.so' \
    --exclude='*.bc' --exclude=cli/dlock --exclude='*.log' "$top"/ "$root/src"/

# copy_old_pg N: this machine's PostgreSQL N, with dlock, into the root.
copy_old_pg() {
    local n=$1 build lib missing i
    if [ ! -x "/usr/lib/postgresql/$n/bin/postgres" ] || [ ! -x "/usr/lib/postgresql/$n/bin/pg_config" ]; then
        apt_get update -q && apt_get install -y -q --no-install-recommends \
            "postgresql-$n" "postgresql-server-dev-$n" build-essential libpq-dev
    fi
    echo "=== PostgreSQL $n of this machine, with dlock, into the root (for the upgrade tests)"
    rm -rf "$root/usr/lib/postgresql/$n" "$root/usr/share/postgresql/$n"
    mkdir -p "$root/usr/lib/postgresql" "$root/usr/share/postgresql"
    cp -a "/usr/lib/postgresql/$n" "$root/usr/lib/postgresql/"
    cp -a "/usr/share/postgresql/$n" "$root/usr/share/postgresql/"
    rm -rf "$root/usr/lib/postgresql/$n/lib/dlock.so" "$root/usr/lib/postgresql/$n/lib/bitcode/dlock"* \
        "$root/usr/share/postgresql/$n/extension/dlock"*
    build=$(mktemp -d)
    rsync -a --exclude=.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' "$root/src"/ "$build"/
    make -s -C "$build" SKIP_CLI=1 PG_CONFIG="/usr/lib/postgresql/$n/bin/pg_config" > "$build/build.log" 2>&1 &&
        make -s -C "$build" SKIP_CLI=1 PG_CONFIG="/usr/lib/postgresql/$n/bin/pg_config" install DESTDIR="$root" \
            >> "$build/build.log" 2>&1 || { cat "$build/build.log"; rm -rf "$build"; return 1; }
    rm -rf "$build"
    # The shared libraries it needs that the root lacks, from this machine,
    # searched after the root's own ("zz-": ld.so.conf.d is read in name
    # order): once the root has its own libpq, its programs (DBD::Pg, the
    # CLI that dpkg-shlibdeps looks at) must not load this machine's older
    # one (undefined symbol PQclosePrepared; 096 found no package for it).
    lib=/usr/lib/postgresql/$n/compat-lib
    mkdir -p "$root$lib"
    rm -f "$root/etc/ld.so.conf.d/dlock-postgresql-$n.conf"
    echo "$lib" > "$root/etc/ld.so.conf.d/zz-dlock-postgresql-$n.conf"
    for i in 1 2 3 4; do
        chroot "$root" ldconfig
        missing=$(for f in "$root/usr/lib/postgresql/$n"/bin/* "$root/usr/lib/postgresql/$n"/lib/*.so; do
                      chroot "$root" ldd "${f#"$root"}" 2>/dev/null || true
                  done | sed -n 's/^[[:space:]]*\([^ ]*\) => not found$/\1/p' | sort -u)
        [ -n "$missing" ] || return 0
        for so in $missing; do
            # awk reads to the end: an early exit would kill ldconfig with
            # SIGPIPE, and under pipefail and -e end this script silently.
            path=$(ldconfig -p | awk -v so="$so" '!p && $1 == so && /x86-64/ {p = $NF} END {print p}')
            [ -n "$path" ] || { echo "copy_old_pg: $so not found on this machine" >&2; return 1; }
            cp -L "$path" "$root$lib/$so"
        done
    done
    echo "copy_old_pg: libraries still missing: $missing" >&2
    return 1
}
[ -z "$old_pg" ] || copy_old_pg "$old_pg"

# in_root NETNS CMD...: CMD in the root, in new mount, PID and IPC namespaces
# (and a new network namespace with only loopback up when NETNS is 1).
in_root() {
    local net=$1; shift
    unshare --mount --pid --ipc --fork --kill-child --propagation private -- bash -c '
        set -e
        root=$1 net=$2; shift 2
        mount --rbind /dev "$root/dev"
        mount -t tmpfs -o mode=1777,size=2g tmpfs "$root/dev/shm"
        mount -t proc proc "$root/proc"
        mount -t sysfs sysfs "$root/sys" 2>/dev/null || true
        # The clients parts gate (.ci/run, test/run-tests.sh): its folder.
        if [ -n "${DLOCK_CLIENTS_GATE:-}" ]; then
            mkdir -p "$root/run/dlock-gate"
            mount --bind "$(dirname "$DLOCK_CLIENTS_GATE")" "$root/run/dlock-gate"
        fi
        if [ "$net" = 1 ]; then
            exec unshare --net -- bash -c "ip link set lo up && exec chroot \"\$0\" \"\$@\"" "$root" "$@"
        fi
        exec chroot "$root" "$@"
    ' in_root "$root" "$net" "$@"
}

# The root's /tmp is its own: emptied before each run, kept after it (a
# failed run's copy of the tree, with its logs, stays there).
rm -rf "${root:?}/tmp"
mkdir -m 1777 "$root/tmp"

# The server binaries of the portable edition's tests are fetched by this
# machine (its npm, network and certificates: a root made by debootstrap
# trusts only Debian's CAs, not, say, a TLS-inspecting proxy's) into the
# root's cache.  Then packages (the registry is reached from the host's
# network), then COMMAND with loopback alone.
# By default the portable edition's tests run only on the root's own
# PostgreSQL here (the npm servers are the same on every release: the
# native run covers them); DLOCK_PORTABLE_MAJORS="debian 14 18" adds some.
portable_majors=${DLOCK_PORTABLE_MAJORS:-debian}
npm_majors=$(echo "$portable_majors" | tr ' ' '\n' | grep -x '[0-9][0-9]*' | tr '\n' ' ' || true)
if [ -n "${npm_majors// /}" ]; then
    DLOCK_PORTABLE_CACHE="$root/var/cache/dlock-portable" bash "$top/test/portable/servers.sh" $npm_majors
fi
# The npm packages of the Node client's tests, the same way, when the
# command runs them (the whole suite, the clients part or one of its files).
case " $* " in
    *" test/run-tests.sh "|*" clients "*|*" test/clients/"*)
        DLOCK_NPM_CACHE="$root/var/cache/dlock-npm" bash "$top/test/clients/node-deps.sh" ||
            echo "test/clients/node-deps.sh failed: the Node client's tests will be skipped" ;;
esac
in_root 0 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    bash -c 'cd /src && . test/lib.sh && install_packages'
in_root 1 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 CI="${CI:-}" \
    DLOCK_PG_MAJOR="${DLOCK_PG_MAJOR:-}" DLOCK_OLD_PG_MAJOR="$old_pg" DLOCK_PORTABLE_MAJORS="$portable_majors" \
    DLOCK_CLIENTS_GATE="${DLOCK_CLIENTS_GATE:+/run/dlock-gate/$(basename "$DLOCK_CLIENTS_GATE")}" \
    DLOCK_CLIENTS_AT="${DLOCK_CLIENTS_AT:-}" DLOCK_GO_DRIVERS="${DLOCK_GO_DRIVERS:-}" DLOCK_GO_RACE="${DLOCK_GO_RACE:-}" \
    DLOCK_CLIENTS_EDITIONS="${DLOCK_CLIENTS_EDITIONS:-}" \
    bash -c 'cd /src && exec "$@"' cmd "$@"
