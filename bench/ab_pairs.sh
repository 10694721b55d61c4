#!/usr/bin/env bash
# bench/ab_pairs.sh: is one build of dlock slower than another?  Uncontended
# lock+unlock pairs of two source trees, alternated in one run.
#
#   bench/ab_pairs.sh [--rounds N] [--seconds S] [--loops M] TREE_A TREE_B
#
# Builds dlock in TREE_A and TREE_B (make; make install DESTDIR=staging),
# starts one throwaway cluster (fsync = off: the CPU of a pair, not the
# disk's flushes), and then, N times (default 6), for A and B in turn (the
# order flips every round): puts that build's dlock.so in the server's
# pkglibdir, restarts (dlock is preloaded), and runs pgbench -M prepared for
# S seconds (default 8) at 1 and 8 clients: dlock's pair (try_lock + unlock,
# as bench/pairs.c) and the naive table's pair (INSERT ... ON CONFLICT +
# DELETE).  Then the backend's CPU per pair, and per fenced check (row
# 'fence': assert_fence in a transaction of its own, against the naive
# table's row locked FOR SHARE).  It prints every sample and, per row, the medians and
# the ratio B / A of dlock's pairs/s each normalised by the naive table's
# pairs/s of the same round (which cancels load that came and went).
#
# Both trees must have the same SQL version (the cluster's extension is
# created once).  It overwrites the installed dlock.so, and restores the
# original at the end: run it where no one else uses that install (a
# debootstrap root: bash test/in-root.sh ... bash bench/ab_pairs.sh ...).
# The extension's SQL files of TREE_A are installed too.
# Root only (it writes pkglibdir and runs the server as user postgres).
set -euo pipefail

rounds=6 secs=8 loops=20000
while [ $# -gt 2 ]; do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --seconds) secs=$2; shift 2 ;;
        --loops) loops=$2; shift 2 ;;
        *) break ;;
    esac
done
[ $# -eq 2 ] || { echo "usage: $0 [--rounds N] [--seconds S] TREE_A TREE_B" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "$0: run as root" >&2; exit 2; }
PG_CONFIG=${PG_CONFIG:-pg_config}
bin=$("$PG_CONFIG" --bindir) lib=$("$PG_CONFIG" --pkglibdir)
work=$(mktemp -d /tmp/dlock-ab.XXXXXX)
chown postgres "$work"
[ -f "$lib/dlock.so" ] && cp -p "$lib/dlock.so" "$work/original.so"
cleanup() {
    runuser -u postgres -- "$bin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
    if [ -f "$work/original.so" ]; then cp -p "$work/original.so" "$lib/dlock.so"; else rm -f "$lib/dlock.so"; fi
    rm -rf "$work"
}
trap cleanup EXIT

for t in A B; do
    tree=$1; shift
    make -s -C "$tree" PG_CONFIG="$PG_CONFIG" >/dev/null
    make -s -C "$tree" PG_CONFIG="$PG_CONFIG" install DESTDIR="$work/$t" >/dev/null
    cp "$work/$t/$lib/dlock.so" "$work/$t.so"
    echo "$t: $tree ($(git -C "$tree" rev-parse --short HEAD 2>/dev/null || echo no git)), md5 $(md5sum <"$work/$t.so" | cut -c1-12)"
done
cp "$work/A/$("$PG_CONFIG" --sharedir)"/extension/dlock* "$("$PG_CONFIG" --sharedir)/extension/"

pg() { runuser -u postgres -- "$@"; }
pg "$bin/initdb" -D "$work/data" -A trust -U postgres >/dev/null
cat >>"$work/data/postgresql.conf" <<EOF
shared_preload_libraries = 'dlock'
fsync = off
listen_addresses = ''
unix_socket_directories = '$work'
max_connections = 40
EOF
cat >"$work/dlock.sql" <<'EOF'
SELECT dlock.try_lock('pair/' || :client_id, 'bench:' || :client_id, '30s');
SELECT dlock.unlock('pair/' || :client_id, 'bench:' || :client_id);
EOF
cat >"$work/naive.sql" <<'EOF'
INSERT INTO naive VALUES ('pair/' || :client_id, 'bench:' || :client_id, now() + '30s') ON CONFLICT (resource) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at WHERE naive.expires_at < now();
DELETE FROM naive WHERE resource = 'pair/' || :client_id AND holder = 'bench:' || :client_id;
EOF
chmod a+r "$work"/*.sql
start() { pg "$bin/pg_ctl" -D "$work/data" -l "$work/log" -w start >/dev/null; }
stop() { pg "$bin/pg_ctl" -D "$work/data" -w stop >/dev/null; }
cp "$work/A.so" "$lib/dlock.so"
start
pg "$bin/psql" -X -q -h "$work" -d postgres -c "CREATE EXTENSION dlock" \
    -c "CREATE TABLE naive (resource text PRIMARY KEY, holder text, expires_at timestamptz)" \
    -f - <<'EOF'
CREATE PROCEDURE pairs_dlock(n integer) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM dlock.try_lock('cpu', 'bench:cpu', '30s'); COMMIT;
        PERFORM dlock.unlock('cpu', 'bench:cpu'); COMMIT;
    END LOOP;
END $$;
CREATE PROCEDURE pairs_naive(n integer) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        INSERT INTO naive VALUES ('cpu', 'bench:cpu', now() + '30s')
            ON CONFLICT (resource) DO UPDATE SET holder = excluded.holder,
            expires_at = excluded.expires_at WHERE naive.expires_at < now();
        COMMIT;
        DELETE FROM naive WHERE resource = 'cpu' AND holder = 'bench:cpu'; COMMIT;
    END LOOP;
END $$;
CREATE PROCEDURE fence_dlock(n integer) LANGUAGE plpgsql AS $$
DECLARE
    f bigint := dlock.try_lock('fence', 'bench:fence', '1h');
BEGIN
    COMMIT;
    FOR i IN 1..n LOOP
        PERFORM dlock.assert_fence('fence', f); COMMIT;
    END LOOP;
    PERFORM dlock.unlock('fence', 'bench:fence'); COMMIT;
END $$;
CREATE PROCEDURE fence_naive(n integer) LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO naive VALUES ('fence', 'bench:fence', now() + '1h') ON CONFLICT DO NOTHING; COMMIT;
    FOR i IN 1..n LOOP
        PERFORM FROM naive WHERE resource = 'fence' AND holder = 'bench:fence'
                             AND expires_at > now() FOR SHARE;
        COMMIT;
    END LOOP;
    DELETE FROM naive WHERE resource = 'fence'; COMMIT;
END $$;
EOF
stop

# tps SCRIPT CLIENTS: pairs/s of one pgbench run.
tps() {
    pg "$bin/pgbench" -n -M prepared -h "$work" -T "$secs" -c "$2" -j "$2" \
        -f "$work/$1.sql" postgres 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}

# cpu PROC: the backend's CPU ns per loop of procedure PROC.
cpu() {
    pg python3 - "$work" "$1" "$loops" <<'EOF'
import sys, psycopg
host, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def on_cpu(pid):
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])
with psycopg.connect(host=host, dbname="postgres", autocommit=True) as c:
    pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
    c.execute(f"CALL {kind}(%s)", (n // 10,))     # warm the caches
    t0 = on_cpu(pid)
    c.execute(f"CALL {kind}(%s)", (n,))
    print(round((on_cpu(pid) - t0) / n))
EOF
}

echo "round build clients dlock_pairs_s naive_pairs_s dlock_over_naive"
echo "  (clients 'cpu': backend CPU ns per pair, dlock and naive, in a procedure;"
echo "   'fence': the same per fenced check)"
samples=$work/samples
: >"$samples"
for r in $(seq 1 "$rounds"); do
    order="A B"; [ $((r % 2)) -eq 0 ] && order="B A"
    for t in $order; do
        cp "$work/$t.so" "$lib/dlock.so"
        start
        for c in 1 8; do
            d=$(tps dlock "$c"); n=$(tps naive "$c")
            line="$r $t $c $d $n $(awk -v d="$d" -v n="$n" 'BEGIN { printf "%.3f", d / n }')"
            echo "$line"; echo "$line" >>"$samples"
        done
        d=$(cpu pairs_dlock); n=$(cpu pairs_naive)
        line="$r $t cpu $d $n $(awk -v d="$d" -v n="$n" 'BEGIN { printf "%.3f", d / n }')"
        echo "$line"; echo "$line" >>"$samples"
        d=$(cpu fence_dlock); n=$(cpu fence_naive)
        line="$r $t fence $d $n $(awk -v d="$d" -v n="$n" 'BEGIN { printf "%.3f", d / n }')"
        echo "$line"; echo "$line" >>"$samples"
        stop
    done
done

# The summary: medians per build and client count, and B / A.
echo
echo "clients median_A median_B B_over_A (dlock/naive of the same round; pairs/s: > 1 is B faster; cpu, fence: < 1 is B cheaper)"
for c in 1 8 cpu fence; do
    a=$(awk -v c="$c" '$2 == "A" && $3 == c { print $6 }' "$samples" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    b=$(awk -v c="$c" '$2 == "B" && $3 == c { print $6 }' "$samples" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    echo "$c $a $b $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')"
done
