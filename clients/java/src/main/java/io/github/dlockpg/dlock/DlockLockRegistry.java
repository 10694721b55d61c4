// DlockLockRegistry: Spring Integration's LockRegistry shape, obtain(key)
// -> Lock, so that frameworks that take a LockRegistry can use dlock (wrap
// it in a one-line adapter: registry::obtain).
package io.github.dlockpg.dlock;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.locks.Lock;
import javax.sql.DataSource;

/**
 * Locks by key: {@link #obtain(Object)} gives the same {@link DlockLock}
 * for the same key (its resource: the prefix and the key's toString()),
 * so threads of this JVM that obtain one key exclude each other as the
 * Lock's contract says, and processes elsewhere through the server.
 */
public final class DlockLockRegistry {
    private final DataSource ds;
    private final String prefix;
    private final Duration lease;
    private final ScheduledExecutorService scheduler;
    private final DlockSession session;
    private final ConcurrentHashMap<String, DlockLock> locks = new ConcurrentHashMap<>();

    /** Locks named by their key, with the server's default lease. */
    public DlockLockRegistry(DataSource ds) {
        this(ds, "", null, null);
    }

    /**
     * PREFIX goes before each key (e.g. "billing:"); LEASE: each lock's
     * (null: the server's default); SCHEDULER: where renewals run (null:
     * the client's own threads).
     */
    public DlockLockRegistry(DataSource ds, String prefix, Duration lease, ScheduledExecutorService scheduler) {
        this.ds = Objects.requireNonNull(ds, "dataSource");
        this.prefix = prefix == null ? "" : prefix;
        this.lease = lease;
        this.scheduler = scheduler;
        this.session = null;
    }

    /** Locks named by PREFIX and their key, taken in SESSION (no lease of their own). */
    public DlockLockRegistry(DlockSession session, String prefix) {
        this.session = Objects.requireNonNull(session, "session");
        this.ds = session.ds;
        this.prefix = prefix == null ? "" : prefix;
        this.lease = null;
        this.scheduler = null;
    }

    /** The lock of KEY: the same object for equal keys' strings. */
    public Lock obtain(Object key) {
        return obtainDlock(key);
    }

    /** obtain(KEY) as a DlockLock (fence, loss, assertFence). */
    public DlockLock obtainDlock(Object key) {
        String name = prefix + Objects.requireNonNull(key, "key");
        return locks.compute(name, (n, l) -> {
            DlockLock out = l != null ? l : DlockLock.builder(ds, n).lease(lease).scheduler(scheduler).session(session).build();
            out.obtained = System.nanoTime();
            return out;
        });
    }

    /**
     * Forgets the locks obtained AGE or longer ago that no thread holds or
     * waits for (Spring Integration's ExpirableLockRegistry): without it,
     * the registry keeps one lock object per key ever obtained. A later
     * obtain of a forgotten key gives a new object (the server still
     * excludes it from any old one).
     */
    public void expireUnusedOlderThan(Duration age) {
        long now = System.nanoTime();
        long limit = Db.nanos(age);
        for (String k : locks.keySet()) {
            locks.computeIfPresent(k, (n, l) -> now - l.obtained >= limit && !l.inUse() ? null : l);
        }
    }
}
