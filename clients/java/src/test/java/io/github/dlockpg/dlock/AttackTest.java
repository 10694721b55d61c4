// AttackTest: the application's DataSource and threads against the client
// (ATTACKS.md classes 1 and 5): a pool of one connection with autoCommit
// off given back as it came; socketTimeout on the DataSource shorter than
// the wait; server-side prepared statements (prepareThreshold), which
// pgbouncer in transaction pooling cannot follow; the caller's scheduler
// shut down; a loss listener that blocks; re-entry into a lost lock;
// read-only and serializable defaults (a release meeting a renewal
// under way is retried, a close meeting a keepalive too; an acquisition
// or campaign the server rolled back, 40001, is sent again: Db.ACQUIRE_TRIES tries
// in all, within its wait, not once interrupted; serializable callers at
// once); a leader that campaigns again once its renewals failed (a
// re-entry keeps the old expiry).
// Promises: P16
package io.github.dlockpg.dlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;

class AttackTest {
    // holdFor: another lock object holds R in a thread of its own for MS, then unlocks.
    private static Thread holdFor(String r, long ms, CountDownLatch taken) {
        Thread t = new Thread(() -> {
            DlockLock other = new DlockLock(TestEnv.app(), r, Duration.ofSeconds(30));
            other.lock();
            taken.countDown();
            try {
                Thread.sleep(ms);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                other.unlock();
            }
        });
        t.start();
        return t;
    }

    @Test
    @DisplayName("a pool of one connection with autoCommit off: given back with autoCommit off after lock, waits, unlock")
    void autoCommitGivenBack() throws Exception {
        String r = TestEnv.unique("autocommit");
        TestEnv.OneConnection ds = new TestEnv.OneConnection(TestEnv.app(), false);
        try (Connection c = ds.getConnection()) {
            c.setAutoCommit(false);
        }
        CountDownLatch taken = new CountDownLatch(1);
        Thread t = holdFor(r, 1500, taken);
        taken.await();
        DlockLock lock = new DlockLock(ds, r, Duration.ofSeconds(30));
        assertTrue(lock.tryLock(20, TimeUnit.SECONDS));
        try (Connection c = ds.getConnection()) {
            assertFalse(c.getAutoCommit(), "after the acquisition: autoCommit off, as it came");
        }
        lock.unlock();
        t.join();
        try (Connection c = ds.getConnection()) {
            assertFalse(c.getAutoCommit(), "after the release: autoCommit off, as it came");
            c.rollback();
        }
        ds.closeReally();
    }

    @Test
    @DisplayName("socketTimeout=1 on the DataSource: a wait of several seconds still acquires (a slice is not a hang)")
    void socketTimeoutShorterThanWait() throws Exception {
        String r = TestEnv.unique("sockettimeout");
        PGSimpleDataSource ds = TestEnv.ds(TestEnv.env("PGUSER", System.getProperty("user.name")), null);
        ds.setSocketTimeout(1);
        CountDownLatch taken = new CountDownLatch(1);
        Thread t = holdFor(r, 3000, taken);
        taken.await();
        DlockLock lock = new DlockLock(ds, r, Duration.ofSeconds(30));
        assertTrue(lock.tryLock(30, TimeUnit.SECONDS));
        lock.unlock();
        t.join();
    }

    @Test
    @DisplayName("prepareThreshold=1 on the DataSource: no server-side prepared statement of the client's (pgbouncer)")
    void noServerSidePreparedStatements() throws Exception {
        String r = TestEnv.unique("prepared");
        PGSimpleDataSource real = TestEnv.ds(TestEnv.env("PGUSER", System.getProperty("user.name")), null);
        real.setPrepareThreshold(1);
        TestEnv.OneConnection ds = new TestEnv.OneConnection(real, false);
        CountDownLatch taken = new CountDownLatch(1);
        Thread t = holdFor(r, 2500, taken);
        taken.await();
        // 3 s: unlock() throws if a renewal was late; 1.5 s left one 0.85 s (CI under load).
        DlockLock lock = new DlockLock(ds, r, Duration.ofSeconds(3));
        assertTrue(lock.tryLock(30, TimeUnit.SECONDS));
        Thread.sleep(3000); // renewals
        lock.unlock();
        t.join();
        try (Connection c = ds.getConnection(); Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT count(*), string_agg(statement, '; ') FROM pg_prepared_statements"
                    + " WHERE statement NOT LIKE '%pg_prepared_statements%'")) {
            rs.next();
            assertEquals(0, rs.getInt(1), "statements prepared on the server by the client: " + rs.getString(2));
        }
        ds.closeReally();
    }

    @Test
    @DisplayName("the caller's scheduler shut down: tryLock() fails and the server does not keep the holding")
    void schedulerShutDown() throws Exception {
        String r = TestEnv.unique("shutdown");
        ScheduledExecutorService mine = Executors.newSingleThreadScheduledExecutor();
        mine.shutdown();
        DlockLock lock = DlockLock.builder(TestEnv.app(), r).lease(Duration.ofSeconds(30)).scheduler(mine).build();
        assertThrows(RuntimeException.class, lock::tryLock);
        assertFalse(lock.isHeldByCurrentThread());
        assertFalse(TestEnv.liveOnServer(r), "the server still holds it for nobody");
    }

    @Test
    @DisplayName("the caller's scheduler shut down while held: loss signalled before the lease's end")
    void schedulerShutDownWhileHeld() throws Exception {
        String r = TestEnv.unique("shutdownheld");
        ScheduledExecutorService mine = Executors.newSingleThreadScheduledExecutor();
        TestEnv.LossClock clock = new TestEnv.LossClock();
        // 6 s: the loss timer has the tenth of the lease (0.6 s) on a loaded machine.
        DlockLock lock = DlockLock.builder(TestEnv.app(), r).lease(Duration.ofSeconds(6)).scheduler(mine)
            .onLost(clock).build();
        lock.lock();
        mine.shutdownNow();
        long end = TestEnv.leaseEndMs(r, lock.fence());
        TestEnv.assertToldBefore(clock, end, () -> TestEnv.leaseEndMs(r, lock.fence()));
        assertThrows(LockLostException.class, lock::unlock);
    }

    @Test
    @DisplayName("a loss listener that blocks: another lock's loss is still signalled before its lease's end")
    void blockingListener() throws Exception {
        String a = TestEnv.unique("blocking-a");
        String b = TestEnv.unique("blocking-b");
        String appA = "dlock-java-" + a.hashCode();
        String appB = "dlock-java-" + b.hashCode();
        TestEnv.OneConnection dsA = new TestEnv.OneConnection(TestEnv.app(appA), false);
        TestEnv.OneConnection dsB = new TestEnv.OneConnection(TestEnv.app(appB), false);
        CountDownLatch release = new CountDownLatch(1);
        TestEnv.LossClock clockB = new TestEnv.LossClock();
        DlockLock lockA = DlockLock.builder(dsA, a).lease(Duration.ofSeconds(1)).onLost(why -> {
            try {
                release.await(15, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }).build();
        DlockLock lockB = DlockLock.builder(dsB, b).lease(Duration.ofSeconds(3))
            .onLost(clockB).build();
        try {
            lockA.lock();
            lockB.lock();
            TestEnv.adminQuery("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name IN (?, ?)",
                appA, appB);
            long end = TestEnv.leaseEndMs(b, lockB.fence());
            TestEnv.assertToldBefore(clockB, end, () -> TestEnv.leaseEndMs(b, lockB.fence()));
            assertTrue(lockB.isLost());
        } finally {
            release.countDown();
        }
        assertThrows(LockLostException.class, lockA::unlock);
        assertThrows(LockLostException.class, lockB::unlock);
    }

    @Test
    @DisplayName("re-entry into a lost lock by its owner: not reported held (LockLostException), the count unchanged")
    void reentryIntoLostLock() throws Exception {
        String r = TestEnv.unique("reentry-lost");
        CompletableFuture<LockLostException> told = new CompletableFuture<>();
        DlockLock lock = DlockLock.builder(TestEnv.app(), r).lease(Duration.ofSeconds(30)).onLost(told::complete).build();
        lock.lock();
        TestEnv.adminQuery("SELECT dlock.break_lock(?)", r);
        told.get(20, TimeUnit.SECONDS);
        assertThrows(LockLostException.class, lock::tryLock);
        assertThrows(LockLostException.class, lock::lock);
        assertThrows(LockLostException.class, () -> lock.tryLock(1, TimeUnit.SECONDS));
        assertEquals(1, lock.getHoldCount());
        assertThrows(LockLostException.class, lock::unlock);
        assertFalse(lock.isHeldByCurrentThread());
    }

    @Test
    @DisplayName("default_transaction_read_only on: lock() fails with SQLSTATE 25006, nothing held")
    void readOnlyDefault() throws Exception {
        String r = TestEnv.unique("readonly");
        PGSimpleDataSource ds = TestEnv.ds(TestEnv.env("PGUSER", System.getProperty("user.name")), null);
        ds.setOptions("-c default_transaction_read_only=on");
        DlockLock lock = new DlockLock(ds, r, Duration.ofSeconds(30));
        DlockException e = assertThrows(DlockException.class, lock::tryLock);
        assertEquals("25006", e.getSQLState());
        assertFalse(lock.isHeldByCurrentThread());
        assertFalse(TestEnv.liveOnServer(r));
    }

    @Test
    @DisplayName("default_transaction_isolation serializable: lock, wait, renew, unlock work")
    void serializableDefault() throws Exception {
        String r = TestEnv.unique("serializable");
        PGSimpleDataSource ds = TestEnv.ds(TestEnv.env("PGUSER", System.getProperty("user.name")), null);
        ds.setOptions("-c default_transaction_isolation=serializable");
        CountDownLatch taken = new CountDownLatch(1);
        Thread t = holdFor(r, 1500, taken);
        taken.await();
        // 6 s: each renewal opens a connection; 1.5 s left it 0.85 s (CI under load).
        DlockLock lock = new DlockLock(ds, r, Duration.ofSeconds(6));
        assertTrue(lock.tryLock(30, TimeUnit.SECONDS));
        Thread.sleep(8000); // renewals past the lease
        assertFalse(lock.isLost());
        lock.unlock();
        t.join();
        assertFalse(TestEnv.liveOnServer(r));
    }

    @Test
    @DisplayName("default_transaction_isolation serializable: a release that meets a renewal under way is retried")
    void serializableReleaseMeetsRenewal() throws Exception {
        String r = TestEnv.unique("serializable-release");
        String appName = "java-test-serializable-release";
        DlockLock lock = new DlockLock(serializable(appName), r, Duration.ofSeconds(30));
        assertTrue(lock.tryLock());
        whileUnderWay("SELECT dlock.renew(resource => ?, holder => ?, lease => '30s'::interval, fence => ?)",
            new Object[] {r, lock.holder(), lock.fence()}, appName, lock::unlock);
        assertFalse(lock.isLost());
        assertFalse(TestEnv.liveOnServer(r));
    }

    @Test
    @DisplayName("default_transaction_isolation serializable: a session's close that meets a keepalive under way is retried")
    void serializableCloseMeetsKeepalive() throws Exception {
        String appName = "java-test-serializable-close";
        DlockSession s = DlockSession.open(serializable(appName), Duration.ofSeconds(30));
        String r = TestEnv.unique("serializable-close");
        DlockLock lock = s.lock(r);
        assertTrue(lock.tryLock());
        whileUnderWay("SELECT dlock.keepalive(session => ?)", new Object[] {s.id()}, appName, s::close);
        assertFalse(TestEnv.liveOnServer(r));
        assertEquals(null, TestEnv.adminQuery("SELECT 1 FROM dlock.sessions WHERE id = ?", s.id()));
    }

    // heldBy HOLDER: its unexpired rows on the server and their counts summed, as "rows/sum".
    private static String heldBy(String holder) throws SQLException {
        return String.valueOf(TestEnv.adminQuery("SELECT count(*) || '/' || coalesce(sum(count), 0)"
            + " FROM dlock.locks WHERE holder = ? AND NOT expired", holder));
    }

    // ofKind KIND DS SESSION: a new lock object of that kind on DS (in SESSION: "session").
    private static DlockLock ofKind(String kind, DataSource ds, DlockSession session) {
        String r = TestEnv.unique("rolledback-" + kind);
        return switch (kind) {
            case "exclusive" -> new DlockLock(ds, r, Duration.ofSeconds(30));
            case "shared" -> DlockLock.builder(ds, r).lease(Duration.ofSeconds(30)).shared(true).build();
            case "semaphore" -> DlockLock.builder(ds, r).lease(Duration.ofSeconds(30)).semaphore(3, 1).build();
            case "several" -> DlockLock.builder(ds, List.of(r + ":a", r + ":b")).lease(Duration.ofSeconds(30)).build();
            case "session" -> session.lock(r);
            default -> throw new IllegalArgumentException(kind);
        };
    }

    private static final List<String> KINDS = List.of("exclusive", "shared", "semaphore", "several", "session");
    private static final List<String> WAITS = List.of("try", "wait", "no limit");

    // take LOCK WAIT: a try (tryLock()), a wait of 5 s (tryLock(5 s)), or no limit (lock()).
    private static boolean take(DlockLock lock, String wait) throws InterruptedException {
        return switch (wait) {
            case "try" -> lock.tryLock();
            case "wait" -> lock.tryLock(5, TimeUnit.SECONDS);
            default -> {
                lock.lock();
                yield true;
            }
        };
    }

    @Test
    @DisplayName("an acquisition the server rolled back twice (40001) is sent again: held once; each kind, a try and waits")
    void rolledBackTwiceAcquires() throws Exception {
        TestEnv.RollingBack rb = new TestEnv.RollingBack(TestEnv.app());
        try (DlockSession s = DlockSession.open(rb.ds, Duration.ofSeconds(30))) {
            for (String kind : KINDS) {
                for (String wait : WAITS) {
                    String what = kind + ", " + wait;
                    DlockLock lock = ofKind(kind, rb.ds, s);
                    rb.arm(2);
                    assertTrue(take(lock, wait), what);
                    assertEquals(3, rb.sent.get(), what + ": acquiring statements sent");
                    assertEquals(0, rb.armed.get(), what);
                    int n = lock.resources().size();
                    assertEquals(n + "/" + n, heldBy(lock.holder()), what + ": held once on the server");
                    assertTrue(lock.check(), what);
                    lock.unlock();
                    assertEquals("0/0", heldBy(lock.holder()), what + ": released");
                }
            }
        }
    }

    @Test
    @DisplayName("an acquisition the server rolled back at every try (40001): the caller gets 40001, nothing held")
    void rolledBackEveryTryThrows() throws Exception {
        TestEnv.RollingBack rb = new TestEnv.RollingBack(TestEnv.app());
        try (DlockSession s = DlockSession.open(rb.ds, Duration.ofSeconds(30))) {
            for (String kind : KINDS) {
                for (String wait : WAITS) {
                    String what = kind + ", " + wait;
                    DlockLock lock = ofKind(kind, rb.ds, s);
                    rb.arm(Db.ACQUIRE_TRIES);
                    DlockException e = assertThrows(DlockException.class, () -> take(lock, wait), what);
                    assertEquals("40001", e.getSQLState(), what);
                    assertEquals(Db.ACQUIRE_TRIES, rb.sent.get(), what + ": acquiring statements sent");
                    assertFalse(lock.isHeldByCurrentThread(), what);
                    assertEquals("0/0", heldBy(lock.holder()), what + ": nothing held on the server");
                    assertTrue(lock.tryLock(), what + ": the lock object is still usable");
                    lock.unlock();
                }
            }
        }
    }

    @Test
    @DisplayName("a campaign the server rolled back twice (40001) is sent again: elected; at every try: 40001, not elected")
    void campaignRolledBack() throws Exception {
        TestEnv.RollingBack rb = new TestEnv.RollingBack(TestEnv.app());
        try (DlockSession s = DlockSession.open(rb.ds, Duration.ofSeconds(30))) {
            for (String how : List.of("wait 0", "wait 5 s", "no limit", "session")) {
                Duration wait = how.equals("wait 5 s") ? Duration.ofSeconds(5) : how.equals("no limit") ? null
                    : Duration.ZERO;
                String name = TestEnv.unique("rolledback-campaign");
                DlockElection e = how.equals("session") ? s.election(name)
                    : new DlockElection(rb.ds, name, Duration.ofSeconds(30));
                rb.arm(2);
                DlockElection.Leadership l = e.campaign("v", wait).orElseThrow();
                assertEquals(3, rb.sent.get(), how + ": campaigns sent");
                assertEquals(e.candidate(), TestEnv.adminQuery("SELECT candidate FROM dlock.leader(?)", name), how);
                assertEquals(l.term(), ((Number) TestEnv.adminQuery("SELECT term FROM dlock.leader(?)", name)).longValue());
                assertTrue(l.resign(), how);
                rb.arm(Db.ACQUIRE_TRIES);
                DlockException x = assertThrows(DlockException.class, () -> e.campaign("v", wait), how);
                assertEquals("40001", x.getSQLState(), how);
                assertEquals(Db.ACQUIRE_TRIES, rb.sent.get(), how + ": campaigns sent");
                assertEquals(null, TestEnv.adminQuery("SELECT candidate FROM dlock.leader(?)", name), how + ": no leader");
            }
        }
    }

    @Test
    @DisplayName("acquisitions rolled back (40001) 1 s after they were sent: sent again with the wait left, no longer in all")
    void rolledBackWithinTheWait() throws Exception {
        TestEnv.RollingBack rb = new TestEnv.RollingBack(TestEnv.app());
        rb.sleepMs = 1000;
        String r = TestEnv.unique("rolledback-wait");
        DlockLock other = new DlockLock(TestEnv.app(), r, Duration.ofSeconds(30));
        assertTrue(other.tryLock());
        DlockLock lock = new DlockLock(rb.ds, r, Duration.ofSeconds(30));
        rb.arm(2);
        long t0 = System.nanoTime();
        assertFalse(lock.tryLock(2500, TimeUnit.MILLISECONDS));
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertEquals(3, rb.sent.get());
        assertTrue(ms >= 2400 && ms < 4400, "tryLock(2.5 s) took " + ms + " ms (the full wait again: 4.5 s)");
        other.unlock();

        String name = TestEnv.unique("rolledback-campaign-wait");
        DlockElection first = new DlockElection(TestEnv.app(), name, Duration.ofSeconds(30));
        DlockElection.Leadership one = first.campaign("one", Duration.ZERO).orElseThrow();
        DlockElection second = new DlockElection(rb.ds, name, Duration.ofSeconds(30));
        rb.arm(2);
        t0 = System.nanoTime();
        assertTrue(second.campaign("two", Duration.ofMillis(2500)).isEmpty());
        ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertEquals(3, rb.sent.get());
        assertTrue(ms >= 2400 && ms < 4400, "campaign(2.5 s) took " + ms + " ms (the full wait again: 4.5 s)");
        assertTrue(one.resign());
    }

    @Test
    @DisplayName("an acquisition rolled back (40001) in an interrupted thread is not sent again: 40001, the status kept")
    void rolledBackInterrupted() throws Exception {
        TestEnv.RollingBack rb = new TestEnv.RollingBack(TestEnv.app());
        DlockLock lock = new DlockLock(rb.ds, TestEnv.unique("rolledback-interrupted"), Duration.ofSeconds(30));
        rb.arm(2);
        Thread.currentThread().interrupt();
        DlockException e;
        try {
            e = assertThrows(DlockException.class, lock::lock);
        } finally {
            assertTrue(Thread.interrupted(), "the interrupt status kept");
        }
        assertEquals("40001", e.getSQLState());
        assertEquals(1, rb.sent.get());
        assertEquals("0/0", heldBy(lock.holder()));
        rb.arm(0);
        assertTrue(lock.tryLock());
        lock.unlock();
    }

    @Test
    @DisplayName("default_transaction_isolation serializable: 4 callers acquiring and releasing 60 distinct resources each at once, no error")
    void serializableCallersAtOnce() throws Exception {
        String prefix = TestEnv.unique("serializable-at-once");
        ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
        AtomicInteger done = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        for (int k = 0; k < 4; k++) {
            int kk = k;
            threads.add(new Thread(() -> {
                DataSource ds = serializable("java-test-at-once-" + kk);
                for (int i = 0; i < 60; i++) {
                    try {
                        DlockLock lock = new DlockLock(ds, prefix + "/" + kk + "/" + i, Duration.ofSeconds(30));
                        if (!lock.tryLock()) throw new AssertionError("not acquired: " + prefix + "/" + kk + "/" + i);
                        lock.unlock();
                        done.incrementAndGet();
                    } catch (Throwable x) {
                        errors.add(x);
                    }
                }
            }));
        }
        for (Thread t : threads) t.start();
        for (Thread t : threads) t.join(120_000);
        assertTrue(errors.isEmpty(), errors.size() + " error(s), the first: " + errors.peek());
        assertEquals(240, done.get());
        assertEquals(0L, ((Number) TestEnv.adminQuery("SELECT count(*) FROM dlock.locks WHERE resource LIKE ?"
            + " AND NOT expired", prefix + "/%")).longValue());
    }

    // serializable APPNAME: the test user's connections, SERIALIZABLE by default.
    private static PGSimpleDataSource serializable(String appName) {
        PGSimpleDataSource ds = TestEnv.ds(TestEnv.env("PGUSER", System.getProperty("user.name")), appName);
        ds.setOptions("-c default_transaction_isolation=serializable");
        return ds;
    }

    // whileUnderWay SQL ARGS APPNAME ACTION: SQL (a renewal, a keepalive)
    // runs in a transaction left open, which holds its row; ACTION runs,
    // and the transaction commits once ACTION's backend (APPNAME) waits
    // for the row (the portable edition; the C extension takes no row
    // lock: then after 10 s).  ACTION's snapshot is older than the commit.
    private static void whileUnderWay(String sql, Object[] args, String appName, Action action) throws Exception {
        Connection c = TestEnv.ds(TestEnv.env("PGUSER", System.getProperty("user.name")), null).getConnection();
        c.setAutoCommit(false);
        try (var ps = c.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) ps.setObject(i + 1, args[i]);
            try (ResultSet rs = ps.executeQuery()) {
                assertTrue(rs.next() && rs.getObject(1) != null, "under way: " + sql);
            }
        }
        CompletableFuture<Void> commit = CompletableFuture.runAsync(() -> {
            try (c) {
                long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (System.nanoTime() < end && TestEnv.adminQuery(
                        "SELECT 1 FROM pg_stat_activity WHERE application_name = ? AND wait_event_type = 'Lock'",
                        appName) == null) {
                    Thread.sleep(20);
                }
                c.commit();
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        action.run();
        commit.get(30, TimeUnit.SECONDS);
    }

    private interface Action {
        void run() throws Exception;
    }

    @Test
    @DisplayName("acquired 0.9 s into a wait slice, lease 600 ms: not lost the moment it is acquired")
    void waitLongerThanLease() throws Exception {
        String r = TestEnv.unique("longwait");
        CountDownLatch waiting = new CountDownLatch(1);
        DlockLock owner = new DlockLock(TestEnv.app(), r, Duration.ofSeconds(30));
        CountDownLatch taken = new CountDownLatch(1);
        Thread h = new Thread(() -> {
            owner.lock();
            taken.countDown();
            try {
                waiting.await();
                Thread.sleep(900);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            owner.unlock();
        });
        h.start();
        taken.await();
        DlockLock lock = new DlockLock(TestEnv.app(), r, Duration.ofMillis(600));
        waiting.countDown();
        assertTrue(lock.tryLock(5, TimeUnit.SECONDS));
        assertFalse(lock.isLost(), "lost the moment it was acquired");
        lock.unlock();
        h.join();
    }

    @Test
    @DisplayName("a campaign that waited longer than the lease (6 s): not lost the moment it is elected")
    void campaignLongerThanLease() throws Exception {
        String e = TestEnv.unique("longcampaign");
        DlockElection first = new DlockElection(TestEnv.app(), e, Duration.ofSeconds(30));
        DlockElection.Leadership one = first.campaign("one", Duration.ZERO).orElseThrow();
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(7500); // longer than the lease
                one.resign();
            } catch (Exception x) {
                throw new IllegalStateException(x);
            }
        });
        t.start();
        // 6 s: each renewal opens a connection; 1.5 s left it 0.85 s (CI under load).
        DlockElection second = new DlockElection(TestEnv.app(), e, Duration.ofSeconds(6));
        DlockElection.Leadership two = second.campaign("two", null).orElseThrow();
        assertFalse(two.isLost(), "lost the moment it was elected");
        Thread.sleep(7500); // past the lease
        assertFalse(two.isLost());
        assertTrue(two.resign());
        t.join();
    }

    @Test
    @DisplayName("interrupts: lock() waits on and keeps the status; tryLock(time) throws, nothing held or left waiting")
    void interrupts() throws Exception {
        String r = TestEnv.unique("interrupts");
        CountDownLatch taken = new CountDownLatch(1);
        Thread t = holdFor(r, 2500, taken);
        taken.await();
        DlockLock a = new DlockLock(TestEnv.app(), r, Duration.ofSeconds(30));
        CompletableFuture<Boolean> aInterrupted = new CompletableFuture<>();
        Thread ta = new Thread(() -> {
            a.lock();
            aInterrupted.complete(Thread.currentThread().isInterrupted());
            a.unlock();
        });
        DlockLock b = new DlockLock(TestEnv.app(), r, Duration.ofSeconds(30));
        CompletableFuture<Throwable> bOut = new CompletableFuture<>();
        Thread tb = new Thread(() -> {
            try {
                bOut.complete(b.tryLock(20, TimeUnit.SECONDS) ? null : new AssertionError("timed out"));
            } catch (Throwable x) {
                bOut.complete(x);
            }
        });
        ta.start();
        tb.start();
        Thread.sleep(500); // both waiting, somewhere in a slice
        ta.interrupt();
        tb.interrupt();
        assertTrue(bOut.get(20, TimeUnit.SECONDS) instanceof InterruptedException);
        assertEquals(0L, ((Number) TestEnv.adminQuery("SELECT count(*) FROM dlock.locks WHERE holder = ?",
            b.holder())).longValue(), "the interrupted tryLock's holder holds nothing");
        assertTrue(aInterrupted.get(20, TimeUnit.SECONDS), "lock() returned, the interrupt status kept");
        ta.join();
        t.join();
        assertFalse(TestEnv.liveOnServer(r));
        Thread.currentThread().interrupt();
        assertThrows(InterruptedException.class, () -> b.tryLock(0, TimeUnit.SECONDS));
        Thread.currentThread().interrupt();
        assertThrows(InterruptedException.class, b::lockInterruptibly);
        assertFalse(Thread.interrupted());
        assertTrue(b.tryLock(-1, TimeUnit.SECONDS), "a negative time: one try");
        b.unlock();
    }

    @Test
    @DisplayName("two candidates, the leader's renewal backend paused past its lease: lost before its end, the other elected, the old term refused")
    void leaderPaused() throws Exception {
        String e = TestEnv.unique("paused-leader");
        String app = "dlock-java-" + e.hashCode();
        TestEnv.OneConnection ds = new TestEnv.OneConnection(TestEnv.app(app), false);
        DlockElection first = new DlockElection(ds, e, Duration.ofSeconds(3));
        DlockElection.Leadership one = first.campaign("one", Duration.ZERO).orElseThrow();
        TestEnv.LossClock clock = new TestEnv.LossClock();
        one.addLossListener(clock);
        DlockElection second = new DlockElection(TestEnv.app(), e, Duration.ofSeconds(30));
        CompletableFuture<DlockElection.Leadership> two = CompletableFuture.supplyAsync(
            () -> second.campaign("two", null).orElseThrow());
        int pid = TestEnv.backendPid(app);
        TestEnv.pauseIdle(pid);
        try {
            long end = TestEnv.leaseEndMs(e, one.term());
            TestEnv.assertToldBefore(clock, end, () -> TestEnv.leaseEndMs(e, one.term()));
            assertTrue(one.isLost());
            DlockElection.Leadership t2 = two.get(30, TimeUnit.SECONDS);
            assertTrue(t2.term() > one.term());
            try (Connection c = TestEnv.app().getConnection()) {
                c.setAutoCommit(false);
                SQLException refused = assertThrows(SQLException.class, () -> one.assertFence(c));
                assertEquals("55P03", refused.getSQLState());
                c.rollback();
            }
            assertTrue(t2.resign());
        } finally {
            TestEnv.signal("CONT", pid);
        }
        assertFalse(one.resign());
        ds.closeReally();
    }

    @Test
    @DisplayName("registry of per-entity keys: expireUnusedOlderThan forgets the unused ones, keeps a held one")
    void registryExpiry() throws Exception {
        DlockLockRegistry reg = new DlockLockRegistry(TestEnv.app(), TestEnv.unique("expiry") + ":",
            Duration.ofSeconds(30), null);
        java.util.List<java.util.concurrent.locks.Lock> used = new java.util.ArrayList<>();
        for (int i = 0; i < 50; i++) {
            java.util.concurrent.locks.Lock l = reg.obtain(i);
            assertTrue(l.tryLock());
            l.unlock();
            used.add(l);
        }
        DlockLock held = reg.obtainDlock("held");
        held.lock();
        reg.expireUnusedOlderThan(Duration.ZERO);
        for (int i = 0; i < 50; i++) assertFalse(reg.obtain(i) == used.get(i), "key " + i + " forgotten");
        assertTrue(reg.obtainDlock("held") == held, "a held lock is kept");
        held.unlock();
    }

    /** A leadership, and whether another (the re-campaigned one) said lost when it was elected. */
    private record Elected(DlockElection.Leadership lead, Boolean otherLost) {}

    @Test
    @DisplayName("a leader whose renewals failed campaigns again at once (re-entry: the old expiry): lost when another is elected")
    void recampaignAfterLoss() throws Exception {
        for (int round = 1; ; round++) {
            String e = TestEnv.unique("recampaign");
            SessionTest.Watched ds = new SessionTest.Watched(TestEnv.app());
            DlockElection first = new DlockElection(ds, e, Duration.ofSeconds(3));
            DlockElection.Leadership one = first.campaign("one", Duration.ZERO).orElseThrow();
            // At once on its loss (renewals failing), the leader campaigns again: its term back.
            CompletableFuture<Object> again = new CompletableFuture<>();
            one.addLossListener(why -> {
                try {
                    again.complete(first.campaign("one", Duration.ZERO));
                } catch (RuntimeException x) {
                    again.complete(x);
                }
            });
            ds.failRenews = true;
            DlockElection second = new DlockElection(TestEnv.app(), e, Duration.ofSeconds(30));
            CompletableFuture<Elected> two = CompletableFuture.supplyAsync(() -> {
                DlockElection.Leadership l = second.campaign("two", null).orElseThrow();
                Object re = again.getNow(null);
                Boolean lost = re instanceof Optional<?> o && o.isPresent()
                    ? ((DlockElection.Leadership) o.get()).isLost() : null;
                return new Elected(l, lost);
            });
            Object re = again.get(30, TimeUnit.SECONDS);
            Elected t2 = two.get(30, TimeUnit.SECONDS);
            assertTrue(t2.lead().term() > one.term());
            assertTrue(t2.lead().resign());
            if (re instanceof Optional<?> o && o.isPresent()) {
                DlockElection.Leadership l = (DlockElection.Leadership) o.get();
                if (t2.otherLost() != null && l.term() == one.term()) {
                    assertTrue(t2.otherLost(), "term " + l.term() + " campaigned again still looked held when "
                        + t2.lead().term() + " was elected");
                    assertTrue(l.isLost());
                    return;
                }
            } else if (re instanceof DlockException) {
                return; // refused: no false belief either
            }
            // Not a re-entry (another was elected first, on a loaded machine): again.
            assertTrue(round < 3, "round " + round + ": the campaign again was not a re-entry: " + re);
        }
    }
}
