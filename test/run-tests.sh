#!/usr/bin/env bash
# run-tests.sh: the README's second command.  On a fresh Debian machine it
# installs what is missing (apt-get, through sudo unless root), builds and
# installs dlock and its CLI, and runs every test: pg_regress, isolation,
# TAP (crash/restart, worker, reaper faults, waits, standby, synchronous
# standby, prepared transactions, CLI and its faults, pgbouncer, pg_cron,
# stress, dump/restore, fence epochs, the upgrade walk, the randomized
# model-checked workload), each on throwaway clusters.
#
# PostgreSQL refuses to run as root, so as root the tests run as the
# "postgres" user on a copy of the tree.  Ends with a line
# "dlock: N passed, M failed" counting single tests, and exits non-zero if
# anything failed.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. test/lib.sh

install_packages
build_and_install WERROR=1

run_as_tester "$top" '
    set -u
    export PATH=/usr/lib/postgresql/15/bin:$PATH
    export PERL5LIB=/usr/lib/postgresql/15/lib/pgxs/src/test/perl
    export PGHOST=/tmp
    passed=0; failed=0
    # pg_regress_counts LOG: add the counts of a pg_regress summary.
    pg_regress_counts() {
        local all bad
        all=$(sed -n "s/^ *All \([0-9]*\) tests passed.*/\1/p; s/^ *[0-9]* of \([0-9]*\) tests failed.*/\1/p" "$1" | tail -n 1)
        bad=$(sed -n "s/^ *\([0-9]*\) of [0-9]* tests failed.*/\1/p" "$1" | tail -n 1)
        [ -n "$all" ] || { failed=$((failed + 1)); return; }
        passed=$((passed + all - ${bad:-0})); failed=$((failed + ${bad:-0}))
    }
    # prove_counts LOG: add the counts of a prove summary.
    prove_counts() {
        local all bad
        all=$(sed -n "s/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p" "$1" | tail -n 1)
        bad=$(grep -o "Failed: [0-9]*)" "$1" | grep -o "[0-9]*" | awk "{s += \$1} END {print s + 0}")
        [ -n "$all" ] || { failed=$((failed + 1)); return; }
        passed=$((passed + all - ${bad:-0})); failed=$((failed + ${bad:-0}))
        grep -q "^Result: PASS" "$1" || [ "${bad:-0}" -gt 0 ] || failed=$((failed + 1))
    }
    show_diffs() {
        for f in regression.diffs output_iso/regression.diffs; do
            [ -s "$f" ] && { echo "--- $f"; head -c 20000 "$f"; }
        done
        return 0
    }
    echo "=== building the stress client (test/stress)"
    if ! make -s -C test/stress > stress-build.log 2>&1; then
        cat stress-build.log
        echo "FAILED: building the stress client (test/t/070_stress.pl will fail too)"
        failed=$((failed + 1))
    fi
    # suite NAME TARGET LOG: run one make target, show its output (and the
    # diffs if it failed).
    suite() {
        echo "=== $1"
        make -s "$2" > "$3" 2>&1 || { cat "$3"; show_diffs; return 0; }
        cat "$3"
    }
    suite "regression tests (pg_regress)" installcheck-regress regress.log
    pg_regress_counts regress.log
    suite "isolation tests" installcheck-isolation isolation.log
    pg_regress_counts isolation.log
    suite "TAP tests" installcheck-tap tap.log
    prove_counts tap.log
    echo "=== MySQL and MariaDB edition (test/mysql/t)"
    prove test/mysql/t > mysql.log 2>&1 || true; cat mysql.log
    prove_counts mysql.log
    echo
    echo "dlock: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
'
