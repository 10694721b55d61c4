// DlockSession: a dlock session (dlock.open_session, keepalive,
// close_session; dlock 1.1): many holdings kept by one keepalive loop.
//
// Keepalive: every third of the ttl, dlock.keepalive(session) on a
// connection taken from the DataSource for that one statement (it works
// behind pgbouncer in transaction pooling), retried with back-off until
// the loss deadline (the last acknowledged keepalive's send time plus the
// ttl, minus a margin). At that deadline (a timer that never touches the
// network), or at once when keepalive returns NULL, the session is lost:
// every holding in it is lost with it, each lock's and the session's
// listeners told, before the ttl ends on the server.  The keepalive's
// statement also checks the (resource, fence) pairs of the session's
// holdings (as known when it is sent) in dlock.locks: one missing (broken
// by an administrator, released by someone else) is lost alone, unless
// its release has begun meanwhile; the session lives on.
//
// State: guarded by this object's monitor; SQL runs outside it.
package io.github.dlockpg.dlock;

import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;

/**
 * A session: the locks taken in it have no lease of their own and live as
 * long as it does. One keepalive loop keeps them all; when the session is
 * lost, each of its locks is lost (its listeners told, {@code isLost()}
 * true) before the session's ttl ends on the server. {@link #close()}
 * releases them all. Releasing one lock leaves the session.
 */
public final class DlockSession implements AutoCloseable {
    private static final String OPEN = "SELECT dlock.open_session(ttl => ?::interval, holder => ?)";
    private static final String TTL_OF = "SELECT extract(epoch FROM ttl)::float8 * 1000 FROM dlock.sessions WHERE id = ?";
    private static final String KEEPALIVE = "SELECT dlock.keepalive(session => ?)";
    // The keepalive, and the 1-based indexes ("2,5") of the pairs gone from
    // dlock.locks (ROWS FROM: unnest(a, b) is that only unqualified).
    private static final String KEEPALIVE_CHECK = "SELECT dlock.keepalive(session => ?::pg_catalog.int8) IS NOT NULL,"
        + " (SELECT pg_catalog.string_agg(t.i::pg_catalog.text, ',')"
        + " FROM ROWS FROM (pg_catalog.unnest(?::pg_catalog.text[]), pg_catalog.unnest(?::pg_catalog.int8[]))"
        + " WITH ORDINALITY AS t(r, f, i)"
        + " WHERE NOT EXISTS (SELECT FROM dlock.locks l WHERE l.resource OPERATOR(pg_catalog.=) t.r"
        + " AND l.fence OPERATOR(pg_catalog.=) t.f AND l.session OPERATOR(pg_catalog.=) ?::pg_catalog.int8))";
    private static final String CLOSE = "SELECT dlock.close_session(session => ?)";

    private enum State { OPEN, CLOSED, LOST }

    final DataSource ds;
    private final long id;
    private final String holder;
    private final long ttlNanos;
    private final ScheduledExecutorService renewals;
    private final List<LossListener> listeners = new CopyOnWriteArrayList<>();
    private final Object closeLock = new Object();

    private State state = State.OPEN;
    private boolean closing;
    private long deadline;
    private ScheduledFuture<?> renewTask;
    private ScheduledFuture<?> lossTask;
    private Throwable lastError;
    private LockLostException lost;
    private final Set<Holding> holdings = new HashSet<>();

    private DlockSession(Builder b, long id, long ttlNanos, long sent) {
        this.ds = b.ds;
        this.id = id;
        this.holder = b.holder;
        this.ttlNanos = ttlNanos;
        this.renewals = b.scheduler != null ? b.scheduler : Db.RENEWALS;
        this.listeners.addAll(b.listeners);
        synchronized (this) {
            renewed(sent);
        }
    }

    /** Opens a session on DS with TTL (null: the server's dlock.default_lease). */
    public static DlockSession open(DataSource ds, Duration ttl) {
        return builder(ds).ttl(ttl).open();
    }

    public static Builder builder(DataSource ds) {
        return new Builder(ds);
    }

    /** How a session is opened: ttl, holder, scheduler, loss listeners. */
    public static final class Builder {
        private final DataSource ds;
        private Duration ttl;
        private String holder;
        private ScheduledExecutorService scheduler;
        private final List<LossListener> listeners = new ArrayList<>();

        private Builder(DataSource ds) {
            this.ds = Objects.requireNonNull(ds, "dataSource");
        }

        /** The ttl (default: the server's dlock.default_lease, 30 s). */
        public Builder ttl(Duration ttl) {
            this.ttl = ttl;
            return this;
        }

        /** The holder of every lock of the session (default: unique to the session). */
        public Builder holder(String holder) {
            this.holder = holder;
            return this;
        }

        /** Where keepalives run (default: the client's own daemon threads). */
        public Builder scheduler(ScheduledExecutorService scheduler) {
            this.scheduler = scheduler;
            return this;
        }

        /** Told once when the session is lost (each lock's own listeners are told too). */
        public Builder onLost(LossListener l) {
            listeners.add(Objects.requireNonNull(l));
            return this;
        }

        /**
         * Opens it (dlock.open_session) and starts its keepalives. A server
         * whose dlock has no sessions (1.0): a DlockException with the
         * server's SQLSTATE (42883) saying so.
         */
        public DlockSession open() {
            if (ttl != null && (ttl.isNegative() || ttl.isZero())) throw DlockException.invalid("ttl must be positive");
            if (holder == null) holder = Db.uniqueHolder();
            Db.text("holder", holder);
            String ttlParam = Db.interval("ttl", ttl);
            long[] sent = new long[1];
            Long id;
            try {
                id = Db.call(ds, OPEN, (c, ps) -> {
                    Db.setInterval(ps, 1, ttlParam);
                    ps.setString(2, holder);
                }, rs -> rs.getLong(1), 0, sent);
            } catch (SQLException e) {
                if ("42883".equals(e.getSQLState()))
                    throw new DlockException("dlock: this server's dlock has no sessions (dlock.open_session(interval, text)"
                        + " is missing: dlock 1.1 or later is needed): " + e.getMessage(), null, e);
                throw DlockException.of("opening a session", e);
            }
            long nanos;
            if (ttl != null) {
                nanos = Db.nanos(ttl);
            } else {
                try {
                    Double ms = Db.call(ds, TTL_OF, (c, ps) -> ps.setLong(1, id), rs -> rs.getDouble(1), 0, null);
                    if (ms == null) throw new LockLostException("session " + id, id, "gone right after it was opened", null);
                    nanos = TimeUnit.MICROSECONDS.toNanos(Math.round(ms * 1000));
                } catch (SQLException e) {
                    abandon(ds, id);
                    throw DlockException.of("reading the session's ttl", e);
                }
            }
            if (System.nanoTime() - sent[0] >= nanos / 3) {
                // A slow answer: a keepalive now dates the session.
                try {
                    Object r = Db.call(ds, KEEPALIVE, (c, ps) -> ps.setLong(1, id), rs -> rs.getObject(1),
                        Math.max(1, TimeUnit.NANOSECONDS.toMillis(nanos / 3)), sent);
                    if (r == null) throw new LockLostException("session " + id, id, "ended before it was confirmed", null);
                } catch (SQLException e) {
                    abandon(ds, id);
                    throw DlockException.of("confirming a session", e);
                }
            }
            return new DlockSession(this, id, nanos, sent[0]);
        }
    }

    private static void abandon(DataSource ds, long id) {
        try {
            Db.call(ds, CLOSE, (c, ps) -> ps.setLong(1, id), rs -> rs.getObject(1), Holding.RELEASE_TIMEOUT_MS, null);
        } catch (SQLException | RuntimeException ignored) {
            // best effort: it ends with its ttl
        }
    }

    /** The session's id (dlock.sessions.id). */
    public long id() {
        return id;
    }

    /** The holder of every lock of the session. */
    public String holder() {
        return holder;
    }

    /** The ttl (as given, or the server's default). */
    public Duration ttl() {
        return Duration.ofNanos(ttlNanos);
    }

    long ttlNanos() {
        return ttlNanos;
    }

    /** A new lock on RESOURCE in this session (exclusive; not acquired yet: lock() or tryLock() it). */
    public DlockLock lock(String resource) {
        return lockBuilder(resource).build();
    }

    /** A builder for a lock on RESOURCE in this session (shared, semaphore, listeners). */
    public DlockLock.Builder lockBuilder(String resource) {
        return DlockLock.builder(ds, resource).session(this);
    }

    /** A builder for several RESOURCES taken together in this session. */
    public DlockLock.Builder lockBuilder(List<String> resources) {
        return DlockLock.builder(ds, resources).session(this);
    }

    /** A candidate (the session's holder) in election NAME whose leaderships are in this session. */
    public DlockElection election(String name) {
        return new DlockElection(this, name);
    }

    /** Adds a listener told once when the session is lost. */
    public void addLossListener(LossListener l) {
        listeners.add(Objects.requireNonNull(l));
    }

    /** True once the session is lost (or held past its loss deadline). */
    public synchronized boolean isLost() {
        return state == State.LOST || (state == State.OPEN && System.nanoTime() - deadline >= 0);
    }

    /** True while the session is open and not lost. */
    public synchronized boolean isOpen() {
        return state == State.OPEN && System.nanoTime() - deadline < 0;
    }

    synchronized LockLostException lostBecause() {
        return lost;
    }

    /** Throws unless the session is open (55000, as the server says of an ended session). */
    void checkOpen() {
        State s;
        synchronized (this) {
            s = state;
        }
        if (s != State.OPEN)
            throw new DlockException("dlock: session " + id + " has ended (" + s.name().toLowerCase() + ")", "55000", lost);
    }

    /** H, just granted, joins the session; throws if the session ended meanwhile (H is then released). */
    synchronized void adopt(Holding h) {
        if (state != State.OPEN)
            throw new DlockException("dlock: " + h.name() + " was granted as session " + id + " ended", "55000", lost);
        holdings.add(h);
    }

    /** Whether another holding of this session is on H's resources (one holding, two counts). */
    synchronized boolean sharedWith(Holding h) {
        for (Holding o : holdings) {
            if (o != h && o.resources.equals(h.resources)) return true;
        }
        return false;
    }

    synchronized void leave(Holding h) {
        holdings.remove(h);
    }

    // renewed SENT: a keepalive (or the open) sent at SENT was acknowledged.
    private synchronized void renewed(long sent) {
        if (state != State.OPEN || closing) return;
        lastError = null;
        deadline = sent + ttlNanos - Holding.margin(ttlNanos);
        if (lossTask != null) lossTask.cancel(false);
        lossTask = Db.TIMER.schedule(() -> lose("keepalives failed until just before the ttl's end"),
            Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        schedule(Math.max(0, sent + ttlNanos / 3 - System.nanoTime()), Holding.RETRY_MIN_MS);
    }

    private synchronized void schedule(long delayNanos, long backoffMs) {
        if (state != State.OPEN || closing) return;
        if (renewTask != null) renewTask.cancel(false);
        renewTask = renewals.schedule(Db.onCall(renewals, () -> keepaliveOnce(backoffMs)), delayNanos,
            TimeUnit.NANOSECONDS);
    }

    private void keepaliveOnce(long backoffMs) {
        long left, readAt;
        List<Holding> hs;
        synchronized (this) {
            if (state != State.OPEN || closing) return;
            left = deadline - System.nanoTime();
            readAt = System.nanoTime();
            hs = new ArrayList<>(holdings);
        }
        // The pairs to check: of holdings held, no release begun (outside this monitor: Holding's first).
        List<Holding> pairOf = new ArrayList<>();
        List<String> names = new ArrayList<>();
        List<Long> fences = new ArrayList<>();
        for (Holding h : hs) {
            if (!h.checkable()) continue;
            for (int k = 0; k < h.fences.length; k++) {
                pairOf.add(h);
                names.add(h.resources.get(k));
                fences.add(h.fences[k]);
            }
        }
        long started = System.nanoTime();
        left -= started - readAt;    // the time spent since it was read
        long timeoutMs = Holding.tryTimeoutMs(ttlNanos, left);
        long[] sent = new long[1];
        Object[] r;
        try {
            r = Db.call(ds, KEEPALIVE_CHECK, (c, ps) -> {
                ps.setLong(1, id);
                ps.setArray(2, c.createArrayOf("text", names.toArray()));
                ps.setArray(3, c.createArrayOf("int8", fences.toArray()));
                ps.setLong(4, id);
            }, rs -> new Object[] {rs.getBoolean(1), rs.getString(2)}, timeoutMs, sent);
        } catch (SQLException | RuntimeException e) {
            synchronized (this) {
                if (state != State.OPEN || closing) return;
                lastError = e;
                schedule(Holding.retryWaitNanos(ttlNanos, backoffMs, started, deadline), Holding.nextBackoffMs(ttlNanos, backoffMs));
            }
            return;
        }
        if (r != null && Boolean.TRUE.equals(r[0])) {
            renewed(sent[0]);
            if (r[1] != null) gone((String) r[1], pairOf);
            return;
        }
        synchronized (this) {
            if (closing) return; // Close ended it: its answer decides
        }
        lose("keepalive() found the session ended (closed, or its ttl passed)");
    }

    // gone INDEXES: those pairs (of PAIR_OF, 1-based) were not in dlock.locks: their holdings lost.
    private void gone(String indexes, List<Holding> pairOf) {
        synchronized (this) {
            if (state != State.OPEN || closing) return; // closed: its answer decides
        }
        Set<Holding> lost = new LinkedHashSet<>();
        for (String i : indexes.split(",")) lost.add(pairOf.get(Integer.parseInt(i.trim()) - 1));
        for (Holding h : lost)
            h.loseUnlessReleasing("not in session " + id + " any more: broken by an administrator, or released by someone else");
    }

    private void lose(String reason) {
        LockLostException e;
        List<Holding> hs;
        synchronized (this) {
            if (state != State.OPEN) return;
            state = State.LOST;
            if (renewTask != null) renewTask.cancel(false);
            if (lossTask != null) lossTask.cancel(false);
            e = new LockLostException("session " + id, id, reason, lastError);
            lost = e;
            hs = new ArrayList<>(holdings);
            holdings.clear();
        }
        for (Holding h : hs) h.lose("its session " + id + " was lost: " + reason, e.getCause());
        if (listeners.isEmpty()) return;
        Runnable tell = () -> {
            for (LossListener l : listeners) {
                try {
                    l.lost(e);
                } catch (RuntimeException ignored) {
                    // a listener's failure is its own
                }
            }
        };
        try {
            Db.LISTENERS.execute(tell);
        } catch (RuntimeException refused) {
            tell.run();
        }
    }

    /**
     * Closes the session (dlock.close_session): every lock of it is
     * released. Throws LockLostException if the session had been lost; a
     * DlockException if the close did not get through (the session is then
     * no longer kept alive and is lost at its deadline unless close() is
     * called again first). Closing twice does nothing.
     */
    @Override
    public void close() {
        synchronized (closeLock) {
            boolean wasLost;
            synchronized (this) {
                if (state == State.CLOSED) return;
                wasLost = state == State.LOST;
                closing = true;
                if (renewTask != null) renewTask.cancel(false);
            }
            Object n;
            try {
                n = closeCall(wasLost ? Math.min(TimeUnit.NANOSECONDS.toMillis(ttlNanos / 3), Holding.RELEASE_TIMEOUT_MS)
                    : Holding.RELEASE_TIMEOUT_MS);
            } catch (SQLException e) {
                if (wasLost) throw lostBecause();
                // Once more after a serialization failure (a keepalive of
                // ours under way, SERIALIZABLE). Not after a lost connection:
                // it may have closed it, and again it would say "lost".
                if (Db.retryable(e)) {
                    try {
                        n = closeCall(Holding.RELEASE_TIMEOUT_MS);
                    } catch (SQLException again) {
                        throw DlockException.of("closing session " + id, again);
                    }
                } else {
                    throw DlockException.of("closing session " + id, e);
                }
            }
            if (wasLost) throw lostBecause();
            if (n == null) {
                synchronized (this) {
                    closing = false;
                }
                lose("it had ended at close (closed by another, or its ttl passed)");
                throw lostBecause();
            }
            List<Holding> hs;
            synchronized (this) {
                if (state == State.LOST) throw lost;
                state = State.CLOSED;
                if (lossTask != null) lossTask.cancel(false);
                hs = new ArrayList<>(holdings);
                holdings.clear();
            }
            for (Holding h : hs) h.closed();
        }
    }

    private Object closeCall(long timeoutMs) throws SQLException {
        return Db.call(ds, CLOSE, (c, ps) -> ps.setLong(1, id), rs -> rs.getObject(1), timeoutMs, null);
    }
}
