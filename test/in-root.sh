#!/usr/bin/env bash
# in-root.sh: run the test suite (or any command) on another Debian release,
# inside a root made with debootstrap from the same Debian registry.  CI runs
# the suite natively on Debian 12 (PostgreSQL 15) and through this script on
# Debian 13 "trixie" (PostgreSQL 17) and Debian "forky" (PostgreSQL 18).
#
#   bash test/in-root.sh [--root DIR] SUITE [COMMAND [ARGS]]
#
# SUITE is a Debian code name (bookworm, trixie, forky, ...).  The root is
# made once in DIR (default /var/cache/dlock-roots/SUITE) and reused; the
# packages the tests need are installed in it (test/lib.sh decides which,
# and which PostgreSQL major: the release's own).  This tree is copied to
# /src in the root, and COMMAND (default: bash test/run-tests.sh) runs there
# as root in private mount, PID, IPC and network namespaces: the servers the
# tests start see only their own loopback, every process they leave is
# killed when COMMAND ends, and their shared memory goes with the root's
# private /dev/shm.  Several roots may run at once.  Root only (debootstrap,
# chroot, unshare).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
root=
while [ $# -gt 0 ]; do
    case $1 in
        --root) root=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || { echo "usage: $0 [--root DIR] SUITE [COMMAND [ARGS]]" >&2; exit 2; }
suite=$1; shift
[ $# -gt 0 ] || set -- bash test/run-tests.sh
root=${root:-/var/cache/dlock-roots/$suite}
[ "$(id -u)" -eq 0 ] || { echo "$0: must run as root (debootstrap, chroot, unshare)" >&2; exit 2; }

mirror=http://deb.debian.org/debian
if ! command -v debootstrap >/dev/null || ! command -v rsync >/dev/null; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap rsync
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

# in_root NETNS CMD...: CMD in the root, in new mount, PID and IPC namespaces
# (and a new network namespace with only loopback up when NETNS is 1).
in_root() {
    local net=$1; shift
    unshare --mount --pid --ipc --fork --propagation private -- bash -c '
        set -e
        root=$1 net=$2; shift 2
        mount --rbind /dev "$root/dev"
        mount -t tmpfs -o mode=1777,size=2g tmpfs "$root/dev/shm"
        mount -t proc proc "$root/proc"
        mount -t sysfs sysfs "$root/sys" 2>/dev/null || true
        mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
        if [ "$net" = 1 ]; then
            exec unshare --net -- bash -c "ip link set lo up && exec chroot \"\$0\" \"\$@\"" "$root" "$@"
        fi
        exec chroot "$root" "$@"
    ' in_root "$root" "$net" "$@"
}

# Packages first (the registry is reached from the host's network), then
# COMMAND with loopback alone.
in_root 0 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    bash -c 'cd /src && . test/lib.sh && install_packages'
in_root 1 env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 CI="${CI:-}" \
    DLOCK_PG_MAJOR="${DLOCK_PG_MAJOR:-}" bash -c 'cd /src && exec "$@"' cmd "$@"
