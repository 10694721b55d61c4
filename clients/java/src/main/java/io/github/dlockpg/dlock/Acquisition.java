// Acquisition: runs an acquiring statement (lock, acquire, lock_all,
// campaign) and makes the Holding.  Waits are sent in slices of at most a
// second, so that an interrupt is seen between them; a wait of zero is one
// try.  A statement the server rolled back (40001: a serializable
// caller's conflict with another; 40P01) granted nothing: it is sent
// again with the wait left, Db.ACQUIRE_TRIES times in all (Db.sendAgain),
// not once interrupted.  The portable edition refuses to wait outside
// READ COMMITTED: on its 0A000 the tries run in READ COMMITTED
// transactions of their own.
// An acquisition that came a third of its lease or more after its
// statement was sent is dated by a renewal sent at once (the lease may have
// begun when it was granted, not when asked for).  So is every campaign
// with a lease: the leader campaigning again gets its term back with the
// old expiry, unextended.  A lost connection
// leaves the outcome unknown: a holder made up by this client is then
// released everywhere (nobody else can use it).  A grant not kept (its
// lease could not be read, its renewals not scheduled, its session ended)
// is given back: a semaphore's permits or a term only if its statement
// began the holding (giveBack).
package io.github.dlockpg.dlock;

import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;

final class Acquisition {
    private Acquisition() {}

    /** Binds the statement's parameters, given the wait of this slice (interval text). */
    interface Binder {
        void bind(Connection c, PreparedStatement ps, String wait) throws SQLException;
    }

    private static final long SLICE_NANOS = TimeUnit.SECONDS.toNanos(1);
    private static final String LEASE_OF = "SELECT extract(epoch FROM lease)::float8 * 1000 FROM dlock.locks"
        + " WHERE resource = ? AND holder = ? AND fence = ? LIMIT 1";
    // STARTED: the column every acquiring statement adds, when it began (µs
    // since the epoch); SINCE_STARTED: that moment, its last parameter.
    private static final String STARTED = "(extract(epoch FROM statement_timestamp()) * 1000000)::bigint";
    private static final String SINCE_STARTED = "timestamptz 'epoch' + ?::bigint * interval '1 microsecond'";
    /**
     * Give backs (giveBack) of kinds whose release ends more than the
     * acquisition took: unlock gives back every permit of the holder, and
     * resign ends the term, which a leader campaigning again gets back.
     * Both end only a holding the acquisition's statement began
     * (acquired_at, elected_at: the first acquisition's, kept when the
     * holder adds permits or campaigns again). Parameters: resource (or
     * election), holder (or candidate), fence (or term), started.
     */
    static final String GIVE_BACK_PERMITS = "SELECT dlock.unlock(resource => l.resource, holder => l.holder,"
        + " fence => l.fence) FROM dlock.locks l WHERE l.resource = ? AND l.holder = ? AND l.fence = ?"
        + " AND l.acquired_at >= " + SINCE_STARTED;
    static final String GIVE_BACK_TERM = "SELECT dlock.resign(election => e.name, candidate => l.candidate,"
        + " term => l.term) FROM (SELECT ?::text) AS e(name), dlock.leader(e.name) AS l"
        + " WHERE l.candidate = ? AND l.term = ? AND l.elected_at >= " + SINCE_STARTED;

    /**
     * The holding, or null when WAIT passed first (null WAIT: no limit;
     * zero: one try). SLICED: the wait is sent in slices (else in one
     * statement). INTERRUPTIBLE: an interrupt between slices throws
     * InterruptedException; else it is kept for the caller.
     */
    static Holding take(DataSource ds, String sql, Binder binder, boolean many, List<String> resources,
            String holder, boolean generated, Duration lease, String releaseSql, String giveBackSql, Duration wait,
            boolean sliced, boolean interruptible, ScheduledExecutorService renewals, List<LossListener> listeners)
            throws InterruptedException {
        return take(ds, sql, binder, many, resources, holder, generated, lease, releaseSql, giveBackSql, wait, sliced,
            interruptible, renewals, listeners, null, false);
    }

    /**
     * take, in SESSION (null: with a lease): the statement gets the
     * argument session => id (as its last parameter); the holding has no
     * lease of its own. CONFIRM (a campaign): with a lease, always dated
     * by a renewal sent once it is answered. RELEASE_SQL releases the
     * holding; a grant not kept is given back by GIVE_BACK_SQL (null:
     * RELEASE_SQL; see giveBack).
     */
    static Holding take(DataSource ds, String sql, Binder binder, boolean many, List<String> resources,
            String holder, boolean generated, Duration lease, String releaseSql, String giveBackSql, Duration wait,
            boolean sliced, boolean interruptible, ScheduledExecutorService renewals, List<LossListener> listeners,
            DlockSession session, boolean confirm) throws InterruptedException {
        if (session != null) {
            session.checkOpen();
            int n = (int) sql.chars().filter(ch -> ch == '?').count() + 1;
            sql = sql.substring(0, sql.lastIndexOf(')')) + ", session => ?)";
            Binder inner = binder;
            binder = (c, ps, w) -> {
                inner.bind(c, ps, w);
                ps.setLong(n, session.id());
            };
        }
        sql += ", " + STARTED;
        long start = System.nanoTime();
        long limit = wait == null ? Long.MAX_VALUE : Db.nanos(wait);
        boolean interrupted = false;
        boolean readCommitted = false;
        int rolledBack = 0; // statements the server rolled back (Db.sendAgain)
        Grant grant = null;
        long sent = 0;
        try (Connection c = ds.getConnection()) {
            boolean auto = c.getAutoCommit();
            int before = c.getNetworkTimeout();
            try (PreparedStatement ps = Db.prepare(c, sql)) {
                if (!auto) c.setAutoCommit(true);
                while (true) {
                    long left = limit == Long.MAX_VALUE ? Long.MAX_VALUE : Math.max(0, limit - (System.nanoTime() - start));
                    Long sliceMs;
                    if (!sliced) sliceMs = wait == null ? null : TimeUnit.NANOSECONDS.toMillis(left);
                    else sliceMs = TimeUnit.NANOSECONDS.toMillis(Math.min(left, SLICE_NANOS));
                    // The caller's socket timeout bounds the round trip, not the wait on the server.
                    if (before > 0) Db.setNetworkTimeout(c, sliceMs == null ? 0 : (int) Math.min(Integer.MAX_VALUE, before + sliceMs));
                    binder.bind(c, ps, sliceMs == null ? null : sliceMs + " milliseconds");
                    sent = System.nanoTime();
                    try {
                        grant = once(c, ps, many, readCommitted);
                    } catch (SQLException e) {
                        // Rolled back by the server (a serializable caller's conflict, a
                        // deadlock): nothing granted; sent again with the wait left.
                        if (Db.sendAgain(e, rolledBack, interrupted)) {
                            rolledBack++;
                            Db.retryPause(rolledBack);
                            continue;
                        }
                        // The portable edition waits only in READ COMMITTED (0A000 under another
                        // default isolation): then each try in a READ COMMITTED transaction of its own.
                        if (readCommitted || !"0A000".equals(e.getSQLState())) throw e;
                        readCommitted = true;
                        c.setAutoCommit(false);
                        continue;
                    }
                    if (grant.fences != null || !sliced || System.nanoTime() - start >= limit) break;
                    if (Thread.interrupted()) {
                        if (interruptible) throw new InterruptedException("dlock: interrupted while waiting for "
                            + String.join(", ", resources));
                        interrupted = true;
                    }
                }
            } finally {
                Db.restore(c, auto, before, before > 0);
            }
        } catch (SQLException e) {
            if (generated && !Db.serverError(e)) forget(ds, holder);
            throw DlockException.of("acquiring " + String.join(", ", resources), e);
        } finally {
            if (interrupted) Thread.currentThread().interrupt();
        }
        long[] fences = grant.fences;
        long started = grant.started;
        if (fences == null) return null;
        long leaseNanos;
        try {
            leaseNanos = session != null ? session.ttlNanos()
                : lease != null ? Db.nanos(lease) : leaseOf(ds, resources.get(0), holder, fences[0]);
        } catch (SQLException | RuntimeException e) {
            giveBack(ds, releaseSql, giveBackSql, many, resources, holder, fences, started);
            throw e instanceof DlockException ? (DlockException) e
                : e instanceof SQLException ? DlockException.of("reading the lease", (SQLException) e)
                : (RuntimeException) e;
        }
        Holding h = new Holding(ds, resources, many, holder, fences, Db.interval("lease", lease), leaseNanos, sent,
            releaseSql, renewals, listeners);
        h.session = session;
        // A long wait (the lease from when it was sent?), or a campaign (a re-entry is not extended).
        if (session == null && (confirm || System.nanoTime() - sent >= leaseNanos / 3)) h.redate(confirm);
        try {
            h.start();
        } catch (RuntimeException e) { // the scheduler refused the renewals (shut down), the session ended: not kept
            giveBack(ds, releaseSql, giveBackSql, many, resources, holder, fences, started);
            throw e;
        }
        return h;
    }

    // An acquiring statement's answer: the fences (null: not granted), when it began (STARTED).
    private record Grant(long[] fences, long started) {}

    // once: one try of PS; READ_COMMITTED: in a READ COMMITTED transaction (autoCommit is off).
    private static Grant once(Connection c, PreparedStatement ps, boolean many, boolean readCommitted)
            throws SQLException {
        if (!readCommitted) {
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return read(rs, many);
            }
        }
        try {
            try (PreparedStatement set = Db.prepare(c, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")) {
                set.execute();
            }
            Grant f;
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                f = read(rs, many);
            }
            c.commit();
            return f;
        } catch (SQLException e) {
            try {
                c.rollback();
            } catch (SQLException ignored) {
                // a broken connection: nothing committed
            }
            throw e;
        }
    }

    private static Grant read(ResultSet rs, boolean many) throws SQLException {
        return new Grant(fences(rs, many), rs.getLong(2));
    }

    private static long[] fences(ResultSet rs, boolean many) throws SQLException {
        if (!many) {
            long f = rs.getLong(1);
            return rs.wasNull() ? null : new long[] {f};
        }
        Array a = rs.getArray(1);
        if (a == null) return null;
        Object[] v = (Object[]) a.getArray();
        long[] out = new long[v.length];
        for (int i = 0; i < v.length; i++) out[i] = ((Number) v[i]).longValue();
        return out;
    }

    private static long leaseOf(DataSource ds, String resource, String holder, long fence) throws SQLException {
        Double ms = Db.call(ds, LEASE_OF, (c, ps) -> {
            ps.setString(1, resource);
            ps.setString(2, holder);
            ps.setLong(3, fence);
        }, rs -> rs.getDouble(1), 0, null);
        if (ms == null) throw new LockLostException(resource, fence, "gone right after it was acquired", null);
        return TimeUnit.MICROSECONDS.toNanos(Math.round(ms * 1000));
    }

    private static void forget(DataSource ds, String holder) {
        try {
            Db.call(ds, "SELECT dlock.unlock_all(holder => ?)", (c, ps) -> ps.setString(1, holder),
                rs -> rs.getObject(1), Holding.RELEASE_TIMEOUT_MS, null);
        } catch (SQLException | RuntimeException ignored) {
            // best effort: its lease ends anyway
        }
    }

    /**
     * Gives back a grant not kept (FENCES, to HOLDER, by a statement begun
     * at STARTED): by RELEASE_SQL, which takes one count off (a re-entry's
     * only), or by GIVE_BACK_SQL (GIVE_BACK_PERMITS, GIVE_BACK_TERM), which
     * leaves what the holder had before. Best effort, retried once after a
     * lost connection: its lease ends anyway.
     */
    private static void giveBack(DataSource ds, String releaseSql, String giveBackSql, boolean many,
            List<String> resources, String holder, long[] fences, long started) {
        if (giveBackSql == null) {
            release(ds, releaseSql, many, resources, holder, fences);
            return;
        }
        for (int attempt = 0; attempt < 2; attempt++) {
            try {
                Db.call(ds, giveBackSql, (c, ps) -> {
                    ps.setString(1, resources.get(0));
                    ps.setString(2, holder);
                    ps.setLong(3, fences[0]);
                    ps.setLong(4, started);
                }, rs -> rs.getObject(1), Holding.RELEASE_TIMEOUT_MS, null);
                return;
            } catch (SQLException e) {
                if (Db.serverError(e)) return;
            } catch (RuntimeException e) {
                return;
            }
        }
    }

    private static void release(DataSource ds, String sql, boolean many, List<String> resources, String holder,
            long[] fences) {
        try {
            new Holding(ds, resources, many, holder, fences, null, TimeUnit.HOURS.toNanos(1), System.nanoTime(),
                sql, Db.RENEWALS, List.of()).release();
        } catch (SQLException | RuntimeException ignored) {
            // best effort: its lease ends anyway
        }
    }
}
