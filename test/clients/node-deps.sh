#!/usr/bin/env bash
# node-deps.sh: the npm packages the Node client's tests use
# (test/clients/t/030_node.t): pg, and typescript with @types/node and
# @types/pg for the type check of clients/node/index.d.ts.  Fetched once
# with npm into $DLOCK_NPM_CACHE/node_modules (default
# /var/cache/dlock-npm), readable by everyone: the tests run as another
# user and only read it.  Already there (same list): nothing is fetched.
# Needs npm (test/lib.sh installs Debian's when missing); test/in-root.sh
# runs this on the host, into the root's cache, since the root's tests
# have no network.
#
#   bash test/clients/node-deps.sh
set -euo pipefail

cache=${DLOCK_NPM_CACHE:-/var/cache/dlock-npm}
packages="pg@8.23.1 typescript@5.9.3 @types/pg@8.23.1 @types/node@18.19.130"

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if [ -d "$cache/node_modules/pg" ] && [ "$(cat "$cache/.packages" 2>/dev/null)" = "$packages" ]; then
    exit 0
fi
command -v npm >/dev/null || { echo "node-deps.sh: npm is not installed" >&2; exit 1; }
echo "=== npm packages for the Node client's tests into $cache: $packages"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
(cd "$tmp" && echo '{"private":true}' > package.json &&
    npm install --no-audit --no-fund --no-package-lock --loglevel=error $packages >/dev/null)
chmod -R a+rX "$tmp/node_modules"
as_root mkdir -p "$cache"
as_root rm -rf "$cache/node_modules"
as_root mv "$tmp/node_modules" "$cache/node_modules"
echo "$packages" | as_root tee "$cache/.packages" >/dev/null
