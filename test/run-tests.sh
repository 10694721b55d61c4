#!/usr/bin/env bash
# run-tests.sh: the README's second command.  On a fresh Debian machine it
# installs what is missing (apt-get, through sudo unless root), builds and
# installs dlock and its CLI, and runs every test: pg_regress, isolation,
# TAP (crash/restart, worker, waits, standby, pg_cron, CLI, pgbouncer,
# stress), each on throwaway clusters with dlock preloaded.
#
# PostgreSQL refuses to run as root, so as root the tests run as the
# "postgres" user on a copy of the tree.  Exits non-zero if anything fails.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. test/lib.sh

install_packages
build_and_install

run_as_tester "$top" '
    set -u
    export PATH=/usr/lib/postgresql/15/bin:$PATH
    export PERL5LIB=/usr/lib/postgresql/15/lib/pgxs/src/test/perl
    export PGHOST=/tmp
    failed=0; passed=0
    step() {
        name=$1; shift
        echo "=== $name"
        if "$@"; then passed=$((passed + 1)); echo "=== $name: ok"
        else failed=$((failed + 1)); echo "=== $name: FAILED"; fi
    }
    show_diffs() {
        for f in regression.diffs output_iso/regression.diffs; do
            [ -s "$f" ] && { echo "--- $f"; head -c 20000 "$f"; }
        done
        return 1
    }
    make -s -C test/stress >/dev/null 2>&1 || true
    step "regression tests (pg_regress)" make -s installcheck-regress || show_diffs
    step "isolation tests" make -s installcheck-isolation || show_diffs
    step "TAP tests" make -s installcheck-tap
    echo
    echo "dlock: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
'
