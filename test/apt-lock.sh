#!/usr/bin/env bash
# apt-lock.sh: apt_get (test/apt.sh) waits for a lock another process holds,
# then proceeds; and gives up after $DLOCK_APT_WAIT seconds.  Three cases:
#  1. /var/lib/dpkg/lock-frontend held: install of a local .deb waits, says
#     so, and installs once the lock is released;
#  2. /var/lib/apt/lists/lock held: update waits, says who holds it, and
#     runs once it is released;
#  3. the lock never released: apt_get fails after DLOCK_APT_WAIT=5.
# A process of this script holds each lock as dpkg and apt do (fcntl).
# Offline (a .deb made here, update with no sources).  It installs and
# removes a package, so it runs only in a throwaway root (with /.dlock-root,
# as test/in-root.sh makes them), as root:
#   bash test/in-root.sh --root DIR bookworm bash test/apt-lock.sh
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "1..0 # SKIP not root"; exit 0; }
[ -e /.dlock-root ] || { echo "1..0 # SKIP not in a throwaway root (test/in-root.sh)"; exit 0; }
. "$top/test/apt.sh"

tmp=$(mktemp -d)
holder_pid=
trap '[ -z "$holder_pid" ] || kill "$holder_pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }

# hold FILE: a process takes FILE's fcntl write lock, writes $tmp/held, and
# keeps it until $tmp/release exists.
hold() {
    rm -f "$tmp/held" "$tmp/release"
    perl -MFcntl -e '
        my ($file, $dir) = @ARGV;
        open(my $fh, ">>", $file) or die "$file: $!";
        my $fl = pack("s s x4 q q l x4", F_WRLCK, 0, 0, 0, 0);    # struct flock, x86-64
        fcntl($fh, F_SETLK, $fl) or die "lock $file: $!";
        open(my $h, ">", "$dir/held") or die; close $h;
        select(undef, undef, undef, 0.1) until -e "$dir/release";
    ' "$1" "$tmp" &
    holder_pid=$!
    until [ -e "$tmp/held" ]; do
        kill -0 "$holder_pid" 2>/dev/null || { echo "Bail out! the lock holder died"; exit 1; }
        sleep 0.1
    done
}
release() { touch "$tmp/release"; wait "$holder_pid" || true; holder_pid=; }
# wait_for_line FILE REGEX PID: until FILE has a line matching REGEX, or PID
# has ended; true when the line came.
wait_for_line() {
    until grep -qE "$2" "$1"; do
        kill -0 "$3" 2>/dev/null || { grep -qE "$2" "$1"; return; }
        sleep 0.2
    done
}

# A package of one file, made here.
mkdir -p "$tmp/pkg/DEBIAN" "$tmp/pkg/usr/share/dlock-apt-lock-test"
echo test > "$tmp/pkg/usr/share/dlock-apt-lock-test/file"
printf 'Package: dlock-apt-lock-test\nVersion: 1\nArchitecture: all\nMaintainer: dlock <dlock@example.org>\nDescription: test package of test/apt-lock.sh\n' \
    > "$tmp/pkg/DEBIAN/control"
dpkg-deb -b "$tmp/pkg" "$tmp/dlock-apt-lock-test.deb" >/dev/null
dpkg -r dlock-apt-lock-test >/dev/null 2>&1 || true
installed() { dpkg-query -W -f='${Status}' dlock-apt-lock-test 2>/dev/null | grep -q "ok installed"; }
nosources=(-o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts=/nonexistent)

echo "1..9"
# 1. The dpkg frontend lock.
hold /var/lib/dpkg/lock-frontend
apt_get install -y -q "$tmp/dlock-apt-lock-test.deb" > "$tmp/1.log" 2>&1 &
pid=$!
wait_for_line "$tmp/1.log" 'Waiting for cache lock.*lock-frontend.*held by process' "$pid"
ok $? "install with lock-frontend held: apt says it waits and who holds it"
kill -0 "$pid" 2>/dev/null && ! installed
ok $? "and it is still waiting, the package not installed"
release
rc=0; wait "$pid" || rc=$?
ok "$rc" "once the lock is released, the install ends with status 0"
installed
ok $? "and the package is installed"
sed 's/^/# /' "$tmp/1.log" | grep -iE 'lock|wait' | head -n 3
dpkg -r dlock-apt-lock-test >/dev/null

# 2. The lists lock (apt-get update ignores DPkg::Lock::Timeout).
hold /var/lib/apt/lists/lock
apt_get update -q "${nosources[@]}" > "$tmp/2.log" 2>&1 &
pid=$!
wait_for_line "$tmp/2.log" 'waiting for it' "$pid"
ok $? "update with the lists lock held: apt_get says it waits"
grep -qE "lists/lock.*held by process $holder_pid" "$tmp/2.log"
ok $? "and names the process holding it ($holder_pid)"
release
rc=0; wait "$pid" || rc=$?
ok "$rc" "once the lock is released, the update ends with status 0"
sed 's/^/# /' "$tmp/2.log" | grep -iE 'lock|wait' | head -n 3

# 3. Bounded: a lock never released.
hold /var/lib/apt/lists/lock
rc=0
DLOCK_APT_WAIT=5 apt_get update -q "${nosources[@]}" > "$tmp/3.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ]
ok $? "with DLOCK_APT_WAIT=5 and the lock never released, update gives up (status $rc)"
grep -q 'Could not get lock' "$tmp/3.log"
ok $? "saying why"
release

echo "# $((n - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
