// Holding: one acquisition on the server (a lock, a shared lock, a
// semaphore's permits, several resources at once, a leadership), renewed
// in the background until it is released or lost.
//
// Renewal: every third of the lease, dlock.renew(...) on a connection taken
// from the DataSource for that one statement (holder-based: it works behind
// pgbouncer in transaction pooling).  A failed renewal is retried with
// back-off (0.1 s to 1 s) until the loss deadline: the time the last
// acknowledged renewal was sent plus the lease, minus a margin (a tenth of
// the lease, at most 1 s).  At that deadline (a timer of its own, which
// never touches the network), or at once when renew() returns NULL, the
// holding is lost: listeners are told, before the lease's end, on a
// thread of their own (a slow one delays no other loss).
//
// In a session (DlockSession): no lease, no renewal, no loss timer of its
// own; the session's keepalives keep it and its loss loses it.  Each
// keepalive also checks that it is still in dlock.locks: if not (broken,
// or released by someone else), it alone is lost, unless its own release
// has begun (its unlock may have just committed).
//
// State: guarded by this object's monitor; SQL runs outside it (a
// session's monitor is taken inside this one, never the other way).
package io.github.dlockpg.dlock;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;

final class Holding {
    enum State { HELD, RELEASED, LOST }

    static final long RETRY_MIN_MS = 100;
    private static final long RETRY_MAX_MS = 1000;
    static final long RELEASE_TIMEOUT_MS = 10_000;

    // The statements: for one resource ($resource, $holder, ..., $fence),
    // and for several (arrays, one answer for all).
    private static final String RENEW_ONE =
        "SELECT dlock.renew(resource => ?, holder => ?, lease => ?::interval, fence => ?)";
    private static final String RENEW_MANY =
        "SELECT nullif(bool_and(dlock.renew(resource => t.r, holder => ?, lease => ?::interval, fence => t.f)"
        + " IS NOT NULL), false) FROM unnest(?::text[], ?::bigint[]) AS t(r, f)";
    static final String UNLOCK_ONE = "SELECT dlock.unlock(resource => ?, holder => ?, fence => ?)";
    static final String RESIGN = "SELECT dlock.resign(election => ?, candidate => ?, term => ?)";
    private static final String UNLOCK_MANY =
        "SELECT bool_and(dlock.unlock(resource => t.r, holder => ?, fence => t.f) IS NOT NULL)"
        + " FROM unnest(?::text[], ?::bigint[]) AS t(r, f)";
    private static final String ASSERT_ONE = "SELECT dlock.assert_fence(resource => ?, fence => ?)";
    private static final String ASSERT_MANY =
        "SELECT count(dlock.assert_fence(resource => t.r, fence => t.f)) FROM unnest(?::text[], ?::bigint[]) AS t(r, f)";
    private static final String CHECK_ONE = "SELECT dlock.check(resource => ?, fence => ?)";
    private static final String CHECK_MANY =
        "SELECT bool_and(dlock.check(resource => t.r, fence => t.f)) FROM unnest(?::text[], ?::bigint[]) AS t(r, f)";

    final DataSource ds;
    final List<String> resources;
    final String holder;
    final long[] fences;
    final String leaseParam;
    final long leaseNanos;
    private final boolean many;
    private final String releaseSql;
    private final ScheduledExecutorService renewals;
    private final List<LossListener> listeners = new CopyOnWriteArrayList<>();

    private long sentAt;
    private State state = State.HELD;
    private long deadline;
    private ScheduledFuture<?> renewTask;
    private ScheduledFuture<?> lossTask;
    private Throwable lastError;
    private LockLostException lost;
    private String unconfirmed; // redate(): why it is lost at start
    private boolean releaseBegun; // release() was called: never cleared
    DlockSession session; // set before start(); null: a lease of its own

    Holding(DataSource ds, List<String> resources, boolean many, String holder, long[] fences, String leaseParam,
            long leaseNanos, long sentAt, String releaseSql, ScheduledExecutorService renewals,
            List<LossListener> listeners) {
        this.ds = ds;
        this.resources = List.copyOf(resources);
        this.many = many;
        this.holder = holder;
        this.fences = fences.clone();
        this.leaseParam = leaseParam;
        this.leaseNanos = leaseNanos;
        this.releaseSql = releaseSql;
        this.renewals = renewals;
        this.listeners.addAll(listeners);
        this.sentAt = sentAt;
    }

    /**
     * Before start(): dates the holding by a renewal sent now (after a wait
     * longer than a third of the lease; a campaign). If the server says it
     * is not held, start() loses it. If the renewal fails, the first date
     * stays (lost at once if that was past); STRICT (a campaign, maybe a
     * re-entry with the old expiry: the first date proves nothing): start()
     * loses it.
     */
    void redate(boolean strict) {
        long[] sent = new long[1];
        try {
            Boolean ok = renewNow(Math.max(1, TimeUnit.NANOSECONDS.toMillis(leaseNanos / 3)), sent);
            if (Boolean.TRUE.equals(ok)) sentAt = sent[0];
            else unconfirmed = "it had ended before its acquisition was answered";
        } catch (SQLException | RuntimeException e) {
            lastError = e;
            if (strict) unconfirmed = "the renewal confirming its campaign failed";
        }
    }

    /**
     * Starts its renewals and its loss timer (unconfirmed by redate(): lost
     * at once). Throws (and the holding is given up here, not lost) if the
     * scheduler refuses them: the caller then releases it on the server.
     */
    void start() {
        if (unconfirmed != null) {
            lose(unconfirmed);
            return;
        }
        try {
            if (session != null) session.adopt(this);
            else renewed(sentAt);
        } catch (RuntimeException e) {
            synchronized (this) {
                stop(State.RELEASED);
            }
            throw e;
        }
    }

    static long margin(long leaseNanos) {
        return Math.min(leaseNanos / 10, TimeUnit.SECONDS.toNanos(1));
    }

    /**
     * How long one renewal or keepalive try may take, LEFT nanoseconds
     * before the deadline: a third of the lease, never past the deadline.
     * (Half the time left was tried: CI under load lost more leases with
     * it.)
     */
    static long tryTimeoutMs(long leaseNanos, long leftNanos) {
        return Math.max(1, TimeUnit.NANOSECONDS.toMillis(Math.min(leftNanos, leaseNanos / 3)));
    }

    /** The longest back-off: a tenth of the lease, at most RETRY_MAX_MS. */
    static long retryCapMs(long leaseNanos) {
        return Math.max(1, Math.min(RETRY_MAX_MS, TimeUnit.NANOSECONDS.toMillis(leaseNanos / 10)));
    }

    /** The next back-off after BACKOFF: doubled, at most retryCapMs. */
    static long nextBackoffMs(long leaseNanos, long backoffMs) {
        return Math.min(backoffMs * 2, retryCapMs(leaseNanos));
    }

    /**
     * Nanoseconds until the try after one that began at STARTED and failed:
     * BACKOFF (at most retryCapMs) from its start, so a try given up at its
     * bound is followed at once; never past DEADLINE.
     */
    static long retryWaitNanos(long leaseNanos, long backoffMs, long started, long deadline) {
        long now = System.nanoTime();
        long b = TimeUnit.MILLISECONDS.toNanos(Math.min(backoffMs, retryCapMs(leaseNanos)));
        return Math.max(0, Math.min(started - now + b, deadline - now));
    }

    String name() {
        return String.join(", ", resources);
    }

    synchronized State state() {
        return state;
    }

    /** Held, and its loss deadline not passed (even if the timer is late). */
    synchronized boolean live() {
        if (session != null) return state == State.HELD && session.isOpen();
        return state == State.HELD && System.nanoTime() - deadline < 0;
    }

    /** Lost, or held past its loss deadline (the timer about to say so). */
    synchronized boolean lostOrDue() {
        if (state == State.LOST) return true;
        if (session != null) return state == State.HELD && session.isLost();
        return state == State.HELD && System.nanoTime() - deadline >= 0;
    }

    synchronized LockLostException lostBecause() {
        return lost;
    }

    /** Held, and no release begun: a session's keepalive may check it. */
    synchronized boolean checkable() {
        return state == State.HELD && !releaseBegun;
    }

    void addListener(LossListener l) {
        listeners.add(l);
    }

    // renewed SENT: a renewal (or the acquisition) sent at SENT was acknowledged.
    private synchronized void renewed(long sent) {
        if (state != State.HELD) return;
        lastError = null;
        deadline = sent + leaseNanos - margin(leaseNanos);
        if (lossTask != null) lossTask.cancel(false);
        lossTask = Db.TIMER.schedule(() -> lose("renewals failed until just before the lease's end"),
            Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        schedule(Math.max(0, sent + leaseNanos / 3 - System.nanoTime()), RETRY_MIN_MS);
    }

    private synchronized void schedule(long delayNanos, long backoffMs) {
        if (state != State.HELD) return;
        if (renewTask != null) renewTask.cancel(false);
        renewTask = renewals.schedule(Db.onCall(renewals, () -> renewOnce(backoffMs)), delayNanos,
            TimeUnit.NANOSECONDS);
    }

    // bind: resources and fences, for one or several.
    private int bindTarget(Connection c, PreparedStatement ps, int i) throws SQLException {
        if (many) {
            ps.setArray(i, c.createArrayOf("text", resources.toArray()));
            Long[] f = new Long[fences.length];
            for (int k = 0; k < f.length; k++) f[k] = fences[k];
            ps.setArray(i + 1, c.createArrayOf("int8", f));
        } else {
            ps.setString(i, resources.get(0));
            ps.setLong(i + 1, fences[0]);
        }
        return i + 2;
    }

    /** One renewal now: true if acknowledged; SENT[0] when it was sent. */
    Boolean renewNow(long timeoutMs, long[] sent) throws SQLException {
        if (many) {
            return Db.call(ds, RENEW_MANY, (c, ps) -> {
                ps.setString(1, holder);
                Db.setInterval(ps, 2, leaseParam);
                bindTarget(c, ps, 3);
            }, rs -> rs.getObject(1) != null, timeoutMs, sent);
        }
        return Db.call(ds, RENEW_ONE, (c, ps) -> {
            ps.setString(1, resources.get(0));
            ps.setString(2, holder);
            Db.setInterval(ps, 3, leaseParam);
            ps.setLong(4, fences[0]);
        }, rs -> rs.getObject(1) != null, timeoutMs, sent);
    }

    private void renewOnce(long backoffMs) {
        long left, readAt;
        synchronized (this) {
            if (state != State.HELD) return;
            left = deadline - System.nanoTime();
            readAt = System.nanoTime();
        }
        long started = System.nanoTime();
        left -= started - readAt;    // the time spent since it was read
        long timeoutMs = tryTimeoutMs(leaseNanos, left);
        long[] sent = new long[1];
        Boolean ok;
        try {
            ok = renewNow(timeoutMs, sent);
        } catch (SQLException | RuntimeException e) {
            synchronized (this) {
                if (state != State.HELD) return;
                lastError = e;
                schedule(retryWaitNanos(leaseNanos, backoffMs, started, deadline), nextBackoffMs(leaseNanos, backoffMs));
            }
            return;
        }
        if (Boolean.TRUE.equals(ok)) renewed(sent[0]);
        else lose("renew() found it no longer held (broken, or expired and taken)");
    }

    void lose(String reason) {
        lose(reason, null);
    }

    /** Lost for REASON (CAUSE: why, if not the last renewal error). */
    void lose(String reason, Throwable cause) {
        lose(reason, cause, false);
    }

    /** Lost for REASON, unless its release has begun (the keepalive's check raced it). */
    void loseUnlessReleasing(String reason) {
        lose(reason, null, true);
    }

    private void lose(String reason, Throwable cause, boolean unlessReleasing) {
        LockLostException e;
        synchronized (this) {
            if (state != State.HELD || (unlessReleasing && releaseBegun)) return;
            e = new LockLostException(name(), fences[0], reason, cause != null ? cause : lastError);
            stop(State.LOST);
            lost = e;
        }
        if (listeners.isEmpty()) return;
        Runnable tell = () -> {
            for (LossListener l : listeners) {
                try {
                    l.lost(e);
                } catch (RuntimeException ignored) {
                    // a listener's failure is its own; the others are still told
                }
            }
        };
        try {
            Db.LISTENERS.execute(tell); // off this thread: a slow listener delays no other loss
        } catch (RuntimeException refused) {
            tell.run();
        }
    }

    /** Its session was closed, and it with it: released. */
    synchronized void closed() {
        if (state == State.HELD) stop(State.RELEASED);
    }

    private void stop(State s) {
        state = s;
        if (renewTask != null) renewTask.cancel(false);
        if (lossTask != null) lossTask.cancel(false);
    }

    /**
     * Gives the holding back: true if it was still held; false if it had
     * been lost (a lost holding is released too, in case the server still
     * has it). Throws if the release did not get through or its answer was
     * lost (the holding then ends with its lease, unrenewed, and is lost at
     * the deadline).
     */
    boolean release() throws SQLException {
        boolean wasLost;
        synchronized (this) {
            if (state == State.RELEASED) return true;
            releaseBegun = true;
            wasLost = state == State.LOST;
            if (!wasLost) {
                state = State.RELEASED;
                if (renewTask != null) renewTask.cancel(false);
            }
        }
        Object r;
        try {
            r = releaseCall(wasLost ? Math.min(TimeUnit.NANOSECONDS.toMillis(leaseNanos / 3), RELEASE_TIMEOUT_MS)
                : RELEASE_TIMEOUT_MS);
        } catch (SQLException e) {
            if (wasLost) return false;
            // Once more after a serialization failure (the caller's default
            // isolation is SERIALIZABLE, and a renewal of ours was under
            // way): that try was rolled back. Never after a lost connection:
            // it may have committed, and again it would take a second count
            // of a holding shared through one holder text.
            if (!Db.retryable(e)) {
                unreleased();
                throw e;
            }
            try {
                r = releaseCall(RELEASE_TIMEOUT_MS);
            } catch (SQLException again) {
                unreleased();
                throw again;
            }
        }
        if (session != null) session.leave(this);
        if (wasLost) return false;
        synchronized (this) {
            if (lossTask != null) lossTask.cancel(false);
        }
        if (r == null || Boolean.FALSE.equals(r)) {
            if (session != null && !session.isLost() && !session.isOpen()) return true; // closed meanwhile
            synchronized (this) {
                state = State.HELD;
            }
            lose("it was no longer held at release (broken, or expired and taken)");
            return false;
        }
        return true;
    }

    /**
     * The release of an unlock() that did not get through, or whose answer
     * was lost, sent again before this lock object's next acquisition.
     * Nothing is told when the holding is gone: that release may have
     * committed. Throws if it does not get through (held, unrenewed).
     */
    void settle() throws SQLException {
        boolean wasLost;
        synchronized (this) {
            if (state == State.RELEASED) return;
            wasLost = state == State.LOST;
            if (!wasLost) state = State.RELEASED;
        }
        try {
            releaseCall(wasLost ? Math.min(TimeUnit.NANOSECONDS.toMillis(leaseNanos / 3), RELEASE_TIMEOUT_MS)
                : RELEASE_TIMEOUT_MS);
        } catch (SQLException e) {
            if (wasLost) return; // a courtesy: its loss was told
            unreleased();
            throw e;
        }
        if (session != null) session.leave(this);
        synchronized (this) {
            if (lossTask != null) lossTask.cancel(false);
        }
    }

    private Object releaseCall(long timeoutMs) throws SQLException {
        if (many) {
            return Db.call(ds, releaseSql, (c, ps) -> {
                ps.setString(1, holder);
                bindTarget(c, ps, 2);
            }, rs -> rs.getObject(1), timeoutMs, null);
        }
        return Db.call(ds, releaseSql, (c, ps) -> {
            ps.setString(1, resources.get(0));
            ps.setString(2, holder);
            ps.setLong(3, fences[0]);
        }, rs -> rs.getObject(1), timeoutMs, null);
    }

    // unreleased: a release that did not get through: held, unrenewed, lost at the deadline.
    private synchronized void unreleased() {
        if (state != State.RELEASED) return;
        state = State.HELD;
        if (session != null) return; // still in the session, which keeps it
        if (lossTask != null) lossTask.cancel(false);
        lossTask = Db.TIMER.schedule(() -> lose("its release got no answer: the lease ends unrenewed"),
            Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
    }

    static String unlockSql(boolean many) {
        return many ? UNLOCK_MANY : UNLOCK_ONE;
    }

    /** dlock.assert_fence on the caller's connection, in its transaction (55P03 when stale). */
    void assertFence(Connection c) throws SQLException {
        try (PreparedStatement ps = Db.prepare(c, many ? ASSERT_MANY : ASSERT_ONE)) {
            bindTarget(c, ps, 1);
            ps.executeQuery().close();
        }
    }

    /** dlock.check: whether this holding is current on the server. */
    boolean check() throws SQLException {
        Boolean ok = Db.call(ds, many ? CHECK_MANY : CHECK_ONE, (c, ps) -> bindTarget(c, ps, 1),
            rs -> rs.getBoolean(1), 0, null);
        return Boolean.TRUE.equals(ok);
    }
}
