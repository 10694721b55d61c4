#!/usr/bin/env bash
# bench/portable_cost.sh: where a portable pair's time goes (bench/HISTORY.md,
# "Portable edition: where a pair's time goes"): the server's time per
# lock+unlock pair of the naive table, of the least a function-based lock
# can do (the floor), of the floor plus each part of the portable fast path
# alone, of the floor plus what never waiting, the event and the epoch
# need at least ("minimal"), and of dlock.try_lock + dlock.unlock
# (bench/portable_cost.sql says what each variant is).
#
#   bench/portable_cost.sh CONNINFO [ROUNDS [PAIRS]]
#
# CONNINFO: a connection, as the database's owner, to a database where the
# portable edition is installed (bench/run.sh passes its portable_bench).
# Installs bench/portable_cost.sql there (schema dlock_cost), then, in each
# of ROUNDS (default 5) rounds, runs dlock_cost.loop(variant, PAIRS)
# (default 3000) for every variant in one psql session (after an untimed
# warm-up call of each), the order rotated from round to round, and prints a markdown table: us per pair, median and
# minimum over the rounds, and the median less the floor's.  Each pair is
# two transactions inside one CALL (no round trips), so the figures are the
# server's work alone; the machine's load moves them far less than it
# moves pairs/s (take the minimum when the machine is busy).
set -euo pipefail
conninfo=${1:?usage: bench/portable_cost.sh CONNINFO [ROUNDS [PAIRS]]}
rounds=${2:-5}
pairs=${3:-3000}
here=$(cd "$(dirname "$0")" && pwd)
PG_BIN=${PG_BIN:-$("${PG_CONFIG:-pg_config}" --bindir)}
psql=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d "$conninfo")

"${psql[@]}" -f "$here/portable_cost.sql" >/dev/null
variants=(naive floor frame prologue nowait advisory event epoch queues waiters minimal dlock)
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
nv=${#variants[@]}
for ((r = 0; r < rounds; r++)); do
    order=()
    for ((i = 0; i < nv; i++)); do order+=("${variants[(i + r) % nv]}"); done
    {
        # a warm-up call of each variant first (functions compiled, plans
        # cached), untimed
        for v in "${order[@]}"; do echo "CALL dlock_cost.loop('$v', 50);"; done
        echo '\timing on'
        for v in "${order[@]}"; do echo "CALL dlock_cost.loop('$v', $pairs);"; done
    } | "${psql[@]}" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' |
        paste -d' ' <(printf '%s\n' "${order[@]}") - >>"$raw"
done

# us per pair: median and minimum over the rounds of each variant
stats() {
    awk -v v="$1" -v n="$pairs" '$1 == v { print $2 * 1000 / n }' "$raw" | sort -n |
        awk '{ a[NR] = $1 } END { if (NR == 0) { print "- -"; exit }
                                  m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
                                  printf "%.1f %.1f\n", m, a[1] }'
}
read -r floor _ < <(stats floor)
echo "| variant | us per pair, median | minimum | median less the floor's |"
echo "|---|---|---|---|"
for v in "${variants[@]}"; do
    read -r med min < <(stats "$v")
    echo "| $v | $med | $min | $(awk -v a="$med" -v b="$floor" 'BEGIN { printf "%+.1f", a - b }') |"
done
echo
echo "($rounds rounds of $pairs pairs per variant, load average $(cut -d' ' -f1-3 /proc/loadavg))"
