#!/usr/bin/env bash
# bench/entities.sh: per-entity locks at scale (issue 25): lock+unlock pairs
# on random resources out of a thousand (hot) and out of a million (cold),
# dlock against the naive table, with the lock table's size.
#
#   bench/entities.sh PGDATA [--quick]   (as root or the cluster's owner)
#
# For N = 1,000 and 1,000,000 resources, fsync off and on, 1 and 8 pgbench
# clients (-M prepared, -j = clients), each pgbench transaction picks a
# random resource out of N and runs
#
#   dlock   SELECT dlock.try_lock('ent/' || r, 'c' || client, '30s');
#           SELECT dlock.unlock('ent/' || r, 'c' || client);
#   naive   INSERT INTO naive_ent VALUES (...) ON CONFLICT (resource)
#             DO UPDATE ... WHERE naive_ent.expires_at < now();
#           DELETE FROM naive_ent WHERE resource = ... AND holder = ...;
#
# (naive_ent: resource text PRIMARY KEY, holder text, expires_at
# timestamptz), in ROUNDS (default 3) alternating rounds of SECS (default 4)
# seconds each: dlock first in odd rounds, naive first in even ones, so
# that the machine's load drifts over both alike.  Prints a markdown
# report: pairs per second of each method (the median round), the median
# of the rounds' ratios dlock / naive, every round's ratio, and the load
# average when the row started, and the server's CPU time per pair of each
# method (see rate) with the ratio naive / dlock: a rate ratio the machine's
# load cannot blur.  Before each N, the resources of the
# previous one are deleted from both tables and both are rewritten (VACUUM
# FULL), so each N's sizes are its own.
# After each N: the size of dlock.leases (table + indexes, and its row
# count; held = rows with a holder, queued = rows of dlock.tickets) and
# of naive_ent, then again after one dlock.reap(), and after a VACUUM of
# both.  --quick: 1 round of 1 s.
set -euo pipefail
data=${1:?usage: bench/entities.sh PGDATA [--quick]}
rounds=${ROUNDS:-3}
secs=${SECS:-4}
if [ "${2:-}" = "--quick" ]; then rounds=1; secs=1; fi
pm=$(sed -n 1p "$data/postmaster.pid")
port=$(sed -n 4p "$data/postmaster.pid")
sock=$(sed -n 5p "$data/postmaster.pid")
bin=$(dirname "$(readlink -f "/proc/$pm/exe")")
dir=$(mktemp -d /tmp/dlock-entities.XXXXXX)
trap 'rm -rf "$dir"' EXIT

cat >"$dir/dlock.sql" <<'EOF'
\set r random(1, :n)
SELECT dlock.try_lock('ent/' || :r, 'c' || :client_id, '30s');
SELECT dlock.unlock('ent/' || :r, 'c' || :client_id);
EOF
cat >"$dir/naive.sql" <<'EOF'
\set r random(1, :n)
INSERT INTO naive_ent VALUES ('ent/' || :r, 'c' || :client_id, now() + '30s') ON CONFLICT (resource) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at WHERE naive_ent.expires_at < now();
DELETE FROM naive_ent WHERE resource = 'ent/' || :r AND holder = 'c' || :client_id;
EOF
chmod -R a+rX "$dir"

psql() { "$bin/psql" -X -q -A -t -P pager=off -h "$sock" -p "$port" -U postgres -d postgres "$@"; }
psql -c "CREATE TABLE IF NOT EXISTS naive_ent (resource text PRIMARY KEY, holder text, expires_at timestamptz)"

# rate METHOD N CLIENTS: "pairs/s cpu_us" of one round: pairs per second,
# and the server's CPU time per pair in microseconds.  The CPU time is what
# the round's backends used (user + system), read from the postmaster's
# cutime + cstime, which the kernel adds each backend's time to when the
# postmaster reaps it at the end of the round (pgbench's connections end
# with it); it does not depend on how busy the machine is, as the rate does.
# Other children of the postmaster that exit in the round (an autovacuum
# worker) are counted too; the WAL writer and checkpointer are not.
cpu_ticks() { awk '{print $16 + $17}' "/proc/$pm/stat"; }
rate() {
    local t0 t1 out tps done_n
    t0=$(cpu_ticks)
    out=$("$bin/pgbench" -n -M prepared -c "$3" -j "$3" -T "$secs" -D n="$2" -f "$dir/$1.sql" \
        -h "$sock" -p "$port" -U postgres postgres 2>/dev/null)
    sleep 0.2   # the postmaster reaps the backends
    t1=$(cpu_ticks)
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -n 1)
    done_n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    awk -v tps="${tps:-0}" -v n="${done_n:-0}" -v dt=$((t1 - t0)) -v hz="$hz" \
        'BEGIN {printf "%s %.1f\n", tps, (n > 0 ? dt / hz * 1e6 / n : 0)}'
}
hz=$(getconf CLK_TCK)
# median: the median of the numbers on stdin.
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
mb() { awk -v b="$1" 'BEGIN {printf "%.2f MB", b / 1048576}'; }
# sizes: "table+indexes bytes|rows|held|queued" of dlock.leases, and naive_ent's bytes.
sizes() {
    psql -c "SELECT pg_total_relation_size('dlock.leases') || '|' ||
                    (SELECT count(*) FROM dlock.leases) || '|' ||
                    (SELECT count(*) FROM dlock.leases WHERE holder IS NOT NULL) || '|' ||
                    (SELECT count(*) FROM dlock.tickets) || '|' ||
                    pg_total_relation_size('naive_ent')"
}
# size_row WHEN: a row of the size table.
size_row() {
    local s bytes rows held queued naive budget verdict
    s=$(sizes)
    IFS='|' read -r bytes rows held queued naive <<<"$s"
    # 1 MB per 10,000 resources held or queued (at least 1 MB: an empty
    # table and its index are never smaller than a few pages).
    budget=$(( ( (held + queued + 9999) / 10000 ) ))
    [ "$budget" -ge 1 ] || budget=1
    if [ "$bytes" -le $(( budget * 1048576 )) ]; then verdict="met"; else verdict="**not met**"; fi
    echo "| $n | $1 | $(mb "$bytes") | $rows | $held + $queued | $budget MB: $verdict | $(mb "$naive") |"
}

echo "Random resources out of N, \`pgbench -M prepared -T $secs\`, $rounds alternating round(s) a row;"
echo "dlock $(psql -c "SELECT extversion FROM pg_extension WHERE extname = 'dlock'") SQL, dlock.leases"\
     "$(psql -c "SELECT coalesce(array_to_string(reloptions, ', '), 'default options') FROM pg_class WHERE oid = 'dlock.leases'::regclass");"
echo "pairs/s of the median round, and the median (and every round's) ratio dlock / naive;"
echo "the server's CPU time per pair (median round; the backends' user + system time), which"
echo "does not move with the machine's load as the rates do."
echo
echo "| N | fsync | clients | dlock pairs/s | naive pairs/s | dlock / naive | rounds | server CPU per pair, dlock / naive (naive / dlock) | load at start |"
echo "|---|---|---|---|---|---|---|---|---|"
size_rows=""
for n in 1000 1000000; do
    psql -c "DELETE FROM dlock.leases WHERE resource LIKE 'ent/%'" -c "TRUNCATE naive_ent" \
         -c "VACUUM FULL dlock.leases" -c "VACUUM FULL naive_ent" -c "CHECKPOINT" >/dev/null
    for fsync in off on; do
        psql -c "ALTER SYSTEM SET fsync = $fsync" -c "SELECT pg_reload_conf()" >/dev/null
        sleep 0.3
        for c in 1 8; do
            load=$(cut -d' ' -f1-3 /proc/loadavg)
            d=(); v=(); r=(); dc=(); vc=()
            for i in $(seq 1 "$rounds"); do
                if [ $((i % 2)) -eq 1 ]; then
                    read -r a ac < <(rate dlock "$n" "$c"); read -r b bc < <(rate naive "$n" "$c")
                else
                    read -r b bc < <(rate naive "$n" "$c"); read -r a ac < <(rate dlock "$n" "$c")
                fi
                d+=("$a"); v+=("$b"); dc+=("$ac"); vc+=("$bc")
                r+=("$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')")
            done
            dcm=$(printf '%s\n' "${dc[@]}" | median); vcm=$(printf '%s\n' "${vc[@]}" | median)
            echo "| $n | $fsync | $c | $(printf '%s\n' "${d[@]}" | median | xargs printf '%.0f') |" \
                 "$(printf '%s\n' "${v[@]}" | median | xargs printf '%.0f') |" \
                 "$(printf '%s\n' "${r[@]}" | median | xargs printf '%.2f')x | ${r[*]} |" \
                 "$(printf '%.0f' "$dcm") / $(printf '%.0f' "$vcm") us, $(awk -v a="$dcm" -v b="$vcm" 'BEGIN {printf "%.2f", (a > 0 ? b / a : 0)}')x | $load |"
        done
    done
    size_rows+="$(size_row "after the run")"$'\n'
    psql -c "SELECT dlock.reap()" >/dev/null
    size_rows+="$(size_row "after one dlock.reap()")"$'\n'
    # What VACUUM gives back: the heap's dead rows go (trailing empty pages
    # are cut off); the indexes keep their pages for reuse.
    psql -c "VACUUM dlock.leases" -c "VACUUM naive_ent" >/dev/null
    size_rows+="$(size_row "then after VACUUM")"$'\n'
done
psql -c "ALTER SYSTEM RESET fsync" -c "SELECT pg_reload_conf()" >/dev/null
echo
echo "Size of dlock.leases (table + indexes) and of naive_ent after the rows above for that N"
echo "(goal: at most 1 MB per 10,000 resources held or queued, and at least 1 MB):"
echo
echo "| N | when | dlock.leases | its rows | held + queued | budget | naive_ent |"
echo "|---|---|---|---|---|---|---|"
printf '%s' "$size_rows"
