# apt.sh: apt_get, apt-get that waits for a lock held by another process.
# Sourced, not run.  On a new machine unattended-upgrades often holds the
# dpkg or apt lock at first boot; a plain apt-get then fails at once.
#
#   apt_get ARGS...    apt-get ARGS as root (sudo when not root),
#                      DEBIAN_FRONTEND=noninteractive
#
# It waits up to $DLOCK_APT_WAIT seconds (default 600) in all.  Install and
# remove wait in apt itself (DPkg::Lock::Timeout, apt 1.9.11 and later);
# apt prints who holds the lock.  apt-get update ignores that option: when
# it fails on a lock, apt_get says who holds it, waits 5 s and runs it again.

apt_get() {
    local - wait=${DLOCK_APT_WAIT:-600} start=$SECONDS err rc left sudo_=
    set -o pipefail
    [ "$(id -u)" -eq 0 ] || sudo_=sudo
    err=$(mktemp)
    while :; do
        left=$((wait - (SECONDS - start)))
        [ "$left" -gt 0 ] || left=1
        rc=0
        : > "$err"
        # apt-get's stderr goes to ours and to $err (rc: apt-get's, by pipefail).
        { $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$left" "$@" \
              2>&1 1>&3 3>&- | tee -a "$err" >&2 3>&-; } 3>&1 || rc=$?
        if [ "$rc" -eq 0 ] || ! grep -q 'Could not get lock' "$err" ||
            [ $((SECONDS - start)) -ge "$wait" ]; then
            break
        fi
        echo "apt-get: $(grep -m 1 'Could not get lock' "$err" | sed 's/^E: //');" \
            "waiting for it (up to $((wait - (SECONDS - start))) s more)" >&2
        sleep 5
    done
    rm -f "$err"
    return "$rc"
}
