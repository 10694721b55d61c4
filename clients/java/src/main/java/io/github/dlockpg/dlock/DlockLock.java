// DlockLock: a dlock lease as a java.util.concurrent.locks.Lock.  One
// holder text per lock object; within the JVM a ReentrantLock decides
// which thread owns it (re-entry by the owner counts locally, the server
// holds it once); the owner's first lock() takes the server's holding and
// its last unlock() gives it back.  Kinds: exclusive (default), shared,
// a semaphore's permits, several resources at once (all or none).
package io.github.dlockpg.dlock;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantLock;
import javax.sql.DataSource;

/**
 * A leased lock on a PostgreSQL server with dlock, renewed in the
 * background every third of its lease while held.
 *
 * <p>Lock semantics per JVM thread: the thread that locked it owns it and
 * may lock it again (a count); {@link #unlock()} by another thread throws
 * IllegalMonitorStateException. Across processes, the server decides.
 *
 * <p>When the lease is lost (broken by an administrator, or renewals failed
 * until just before its end), {@link #isLost()} becomes true and the loss
 * listeners are told, before the lease ends on the server; the owner's
 * last {@link #unlock()} then throws {@link LockLostException}, and so
 * does a re-entry by the owner (lock, tryLock) without counting. Errors are
 * {@link DlockException}s carrying the SQLSTATE.
 */
public class DlockLock implements Lock {
    private final DataSource ds;
    private final List<String> resources;
    private final boolean many;
    private final String holder;
    private final boolean generated;
    private final Duration lease;
    private final boolean shared;
    private final int maxPermits;
    private final int permits;
    private final ScheduledExecutorService renewals;
    private final DlockSession session;
    private final List<LossListener> listeners = new CopyOnWriteArrayList<>();
    private final ReentrantLock local = new ReentrantLock();
    private volatile Holding current;
    private volatile Holding last;
    private volatile Holding unreleased; // an unlock() that did not get through (settleUnreleased)
    volatile long obtained; // DlockLockRegistry: when it last gave this object out

    /** An exclusive lock on RESOURCE with the server's default lease. */
    public DlockLock(DataSource ds, String resource) {
        this(builder(ds, resource));
    }

    /** An exclusive lock on RESOURCE with LEASE. */
    public DlockLock(DataSource ds, String resource, Duration lease) {
        this(builder(ds, resource).lease(lease));
    }

    private DlockLock(Builder b) {
        this.ds = Objects.requireNonNull(b.ds, "dataSource");
        this.resources = List.copyOf(b.resources);
        this.many = b.many;
        this.session = b.session;
        if (session != null && b.lease != null) throw DlockException.invalid("a lock in a session has no lease of its own");
        if (session != null && b.holder != null && !b.holder.equals(session.holder()))
            throw DlockException.invalid("a lock in a session has the session's holder");
        this.generated = b.holder == null && session == null;
        this.holder = session != null ? session.holder() : generated ? Db.uniqueHolder() : Db.text("holder", b.holder);
        if (b.lease != null && (b.lease.isNegative() || b.lease.isZero()))
            throw DlockException.invalid("lease must be positive");
        this.lease = b.lease;
        this.shared = b.shared;
        this.maxPermits = b.maxPermits;
        this.permits = b.permits;
        this.renewals = b.scheduler != null ? b.scheduler : Db.RENEWALS;
        this.listeners.addAll(b.listeners);
        if (resources.isEmpty()) throw DlockException.invalid("no resource");
        for (String r : resources) Db.text("resource", r);
        if (many && new HashSet<>(resources).size() != resources.size())
            throw DlockException.invalid("a resource is named twice");
        if (maxPermits > 0 && (many || shared)) throw DlockException.invalid("a semaphore is one name, not shared");
    }

    /** A builder for a lock on one RESOURCE (exclusive unless told otherwise). */
    public static Builder builder(DataSource ds, String resource) {
        return new Builder(ds, List.of(Objects.requireNonNull(resource, "resource")), false);
    }

    /** A builder for several RESOURCES taken together, all or none (dlock.lock_all). */
    public static Builder builder(DataSource ds, List<String> resources) {
        return new Builder(ds, new ArrayList<>(resources), true);
    }

    /** How a DlockLock is made: lease, holder, kind, scheduler, loss listeners. */
    public static final class Builder {
        private final DataSource ds;
        private final List<String> resources;
        private final boolean many;
        private Duration lease;
        private String holder;
        private boolean shared;
        private int maxPermits;
        private int permits = 1;
        private ScheduledExecutorService scheduler;
        private DlockSession session;
        private final List<LossListener> listeners = new ArrayList<>();

        private Builder(DataSource ds, List<String> resources, boolean many) {
            this.ds = ds;
            this.resources = resources;
            this.many = many;
        }

        /** The lease (default: the server's dlock.default_lease, 30 s). */
        public Builder lease(Duration lease) {
            this.lease = lease;
            return this;
        }

        /** The holder text (default: unique to this lock object). */
        public Builder holder(String holder) {
            this.holder = holder;
            return this;
        }

        /** A shared (read) holding: any number at once, or one exclusive. */
        public Builder shared(boolean shared) {
            this.shared = shared;
            return this;
        }

        /** PERMITS permits of a counting semaphore of MAX_PERMITS (dlock.acquire). */
        public Builder semaphore(int maxPermits, int permits) {
            if (maxPermits < 1 || permits < 1) throw DlockException.invalid("permits and maxPermits must be positive");
            this.maxPermits = maxPermits;
            this.permits = permits;
            return this;
        }

        /** Where renewals run (default: the client's own daemon threads). */
        public Builder scheduler(ScheduledExecutorService scheduler) {
            this.scheduler = scheduler;
            return this;
        }

        /**
         * Takes it in SESSION (DlockSession): no lease of its own, the
         * session's holder; lost when the session is.
         */
        public Builder session(DlockSession session) {
            this.session = session;
            return this;
        }

        /** Told when a holding of this lock is lost. */
        public Builder onLost(LossListener l) {
            listeners.add(Objects.requireNonNull(l));
            return this;
        }

        public DlockLock build() {
            return new DlockLock(this);
        }
    }

    /** The resource (for several: the first). */
    public String resource() {
        return resources.get(0);
    }

    public List<String> resources() {
        return resources;
    }

    /** The session it is taken in, or null. */
    public DlockSession session() {
        return session;
    }

    /** This lock object's holder text. */
    public String holder() {
        return holder;
    }

    /** Adds a listener told when a holding of this lock is lost (also one taken already). */
    public void addLossListener(LossListener l) {
        listeners.add(Objects.requireNonNull(l));
        Holding h = current;
        if (h != null) h.addListener(l);
    }

    @Override
    public void lock() {
        local.lock();
        if (local.getHoldCount() > 1) {
            reentered();
            return;
        }
        boolean done = false;
        try {
            take(null, false);
            done = true;
        } catch (InterruptedException e) {
            throw new IllegalStateException(e); // not thrown when not interruptible
        } finally {
            if (!done) local.unlock();
        }
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        local.lockInterruptibly();
        if (local.getHoldCount() > 1) {
            reentered();
            return;
        }
        boolean done = false;
        try {
            if (Thread.interrupted()) throw new InterruptedException();
            take(null, true);
            done = true;
        } finally {
            if (!done) local.unlock();
        }
    }

    @Override
    public boolean tryLock() {
        if (!local.tryLock()) return false;
        if (local.getHoldCount() > 1) {
            reentered();
            return true;
        }
        boolean done = false;
        try {
            done = take(Duration.ZERO, false);
            return done;
        } catch (InterruptedException e) {
            throw new IllegalStateException(e);
        } finally {
            if (!done) local.unlock();
        }
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        long start = System.nanoTime();
        long limit = Math.max(0, unit.toNanos(time));
        if (!local.tryLock(limit, TimeUnit.NANOSECONDS)) return false;
        if (local.getHoldCount() > 1) {
            reentered();
            return true;
        }
        boolean done = false;
        try {
            long left = Math.max(0, limit - (System.nanoTime() - start));
            done = take(Duration.ofNanos(left), true);
            return done;
        } finally {
            if (!done) local.unlock();
        }
    }

    // reentered: the owner locked again; not while its holding is lost (the count is undone).
    private void reentered() {
        Holding h = current;
        if (h == null || !h.lostOrDue()) return;
        local.unlock();
        LockLostException e = h.lostBecause();
        throw e != null ? e : new LockLostException(h.name(), h.fences[0], "its lease ran out unrenewed", null);
    }

    // take WAIT: the server's holding, this thread owning the local lock.
    private boolean take(Duration wait, boolean interruptible) throws InterruptedException {
        settleUnreleased();
        String sql;
        Acquisition.Binder binder;
        if (many) {
            sql = "SELECT dlock.lock_all(resources => ?::text[], holder => ?, lease => ?::interval,"
                + " wait => ?::interval, shared => ?)";
            binder = (c, ps, w) -> {
                ps.setArray(1, c.createArrayOf("text", resources.toArray()));
                ps.setString(2, holder);
                Db.setInterval(ps, 3, Db.interval("lease", lease));
                Db.setInterval(ps, 4, w);
                ps.setBoolean(5, shared);
            };
        } else if (maxPermits > 0) {
            sql = "SELECT dlock.acquire(semaphore => ?, holder => ?, max_permits => ?, permits => ?,"
                + " lease => ?::interval, wait => ?::interval)";
            binder = (c, ps, w) -> {
                ps.setString(1, resources.get(0));
                ps.setString(2, holder);
                ps.setInt(3, maxPermits);
                ps.setInt(4, permits);
                Db.setInterval(ps, 5, Db.interval("lease", lease));
                Db.setInterval(ps, 6, w);
            };
        } else {
            sql = "SELECT dlock.lock(resource => ?, holder => ?, lease => ?::interval, wait => ?::interval"
                + (shared ? ", shared => true)" : ")");
            binder = (c, ps, w) -> {
                ps.setString(1, resources.get(0));
                ps.setString(2, holder);
                Db.setInterval(ps, 3, Db.interval("lease", lease));
                Db.setInterval(ps, 4, w);
            };
        }
        Holding h = Acquisition.take(ds, sql, binder, many, resources, holder, generated, lease,
            Holding.unlockSql(many), maxPermits > 0 ? Acquisition.GIVE_BACK_PERMITS : null, wait, true, interruptible,
            renewals, listeners, session, false);
        if (h == null) return false;
        current = h;
        last = h;
        return true;
    }

    /**
     * Gives the lock back (one count; the last one releases the server's
     * holding). Throws IllegalMonitorStateException unless this thread owns
     * it, and LockLostException when the lease had been lost meanwhile.
     */
    @Override
    public void unlock() {
        if (!local.isHeldByCurrentThread())
            throw new IllegalMonitorStateException("dlock: " + resource() + " is not held by this thread");
        if (local.getHoldCount() > 1) {
            local.unlock();
            return;
        }
        Holding h = current;
        current = null;
        try {
            if (!h.release()) {
                LockLostException e = h.lostBecause();
                throw e != null ? e : new LockLostException(h.name(), h.fences[0], "lost", null);
            }
        } catch (SQLException e) {
            unreleased = h;
            throw DlockException.of("releasing " + h.name(), e);
        } finally {
            local.unlock();
        }
    }

    // settleUnreleased: the release an unlock() could not get through (or
    // whose answer was lost) is sent again before a new acquisition, which
    // would otherwise re-enter that holding on the server: a count no
    // unlock() gives back. Not while another lock of the session holds the
    // resource too: it could take that lock's count. Throws if it still
    // does not get through.
    private void settleUnreleased() {
        Holding h = unreleased;
        if (h == null) return;
        if (session != null && session.sharedWith(h)) {
            unreleased = null;
            return;
        }
        try {
            h.settle();
        } catch (SQLException e) {
            throw DlockException.of("releasing " + h.name() + " (an earlier unlock() that did not get through)", e);
        }
        unreleased = null;
    }

    /** Not supported: a condition would need the lock to be given back while waiting. */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("dlock: DlockLock has no conditions");
    }

    private Holding last() {
        Holding h = last;
        if (h == null) throw new IllegalStateException("dlock: " + resource() + " was never acquired");
        return h;
    }

    /** The fencing token of the current (or last) holding. */
    public long fence() {
        return last().fences[0];
    }

    /** The fences of several resources, in their order. */
    public long[] fences() {
        return last().fences.clone();
    }

    /** True once the current (or last) holding's lease has been lost. */
    public boolean isLost() {
        Holding h = last;
        return h != null && h.lostOrDue();
    }

    /** True while a thread holds it and its lease has not been lost. */
    public boolean isHeld() {
        Holding h = current;
        return h != null && h.live();
    }

    public boolean isHeldByCurrentThread() {
        return local.isHeldByCurrentThread();
    }

    public int getHoldCount() {
        return local.getHoldCount();
    }

    // inUse: a thread holds it or waits for it (DlockLockRegistry keeps it).
    boolean inUse() {
        return local.isLocked() || local.hasQueuedThreads();
    }

    /**
     * Runs dlock.assert_fence on CONNECTION, in the caller's transaction:
     * SQLSTATE 55P03 there unless this holding is still current; then it
     * cannot be taken over until that transaction ends, so a write fenced
     * in it is atomic with the check.
     */
    public void assertFence(Connection connection) throws SQLException {
        last().assertFence(connection);
    }

    /** dlock.check: whether the current holding is still current on the server. */
    public boolean check() throws SQLException {
        return last().check();
    }
}
