// KindsTest: shared locks, semaphores, several resources at once, the
// registry (Spring Integration's LockRegistry shape), elections, errors
// carrying the SQLSTATE (the server's and the client's own), and grants
// not kept given back without what their holder held before.
// Promises: P2 P6 P8 P9 P10 P11 P16
package io.github.dlockpg.dlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;
import javax.sql.DataSource;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class KindsTest {
    private static final Duration LEASE = Duration.ofSeconds(10);
    private final DataSource ds = TestEnv.app();

    @Test
    @DisplayName("shared: two readers at once with distinct fences, a writer refused meanwhile, let in after")
    void shared() throws Exception {
        String r = TestEnv.unique("shared");
        DlockLock r1 = DlockLock.builder(ds, r).lease(LEASE).shared(true).build();
        DlockLock r2 = DlockLock.builder(ds, r).lease(LEASE).shared(true).build();
        DlockLock w = new DlockLock(ds, r, LEASE);
        assertTrue(r1.tryLock());
        assertTrue(r2.tryLock());
        assertNotEquals(r1.fence(), r2.fence());
        assertFalse(w.tryLock());
        r1.unlock();
        r2.unlock();
        assertTrue(w.tryLock());
        assertTrue(w.fence() > Math.max(r1.fence(), r2.fence()));
        w.unlock();
    }

    @Test
    @DisplayName("semaphore: never more than maxPermits; permits back on unlock; renewed past its lease")
    void semaphore() throws Exception {
        String s = TestEnv.unique("sem");
        List<DlockLock> l = new ArrayList<>();
        // 6 s: each renewal opens a connection; 1.5 s left it 0.85 s (CI under load).
        for (int i = 0; i < 3; i++) l.add(DlockLock.builder(ds, s).lease(Duration.ofSeconds(6)).semaphore(2, 1).build());
        assertTrue(l.get(0).tryLock());
        assertTrue(l.get(1).tryLock());
        assertFalse(l.get(2).tryLock(), "a third permit of two");
        Thread.sleep(7500); // past the lease: renewed
        assertFalse(l.get(0).isLost());
        assertFalse(l.get(2).tryLock());
        l.get(0).unlock();
        assertTrue(l.get(2).tryLock(5, TimeUnit.SECONDS));
        l.get(1).unlock();
        l.get(2).unlock();
        DlockLock other = DlockLock.builder(ds, s).semaphore(3, 1).build();
        DlockLock held = DlockLock.builder(ds, s).semaphore(2, 1).build();
        held.lock();
        DlockException e = assertThrows(DlockException.class, other::tryLock);
        assertEquals("22023", e.getSQLState(), "another maxPermits while a permit is held");
        held.unlock();
    }

    @Test
    @DisplayName("several resources: all or none, fences in order; renewed together; one broken: lost, the others released")
    void multi() throws Exception {
        String a = TestEnv.unique("multi-a");
        String b = TestEnv.unique("multi-b");
        DlockLock single = new DlockLock(ds, b, LEASE);
        // 6 s: each renewal opens a connection; 1.5 s left it 0.85 s (CI under load).
        DlockLock both = DlockLock.builder(ds, List.of(a, b)).lease(Duration.ofSeconds(6)).build();
        single.lock();
        assertFalse(both.tryLock(), "one of them is taken");
        assertEquals(null, TestEnv.adminQuery("SELECT fence FROM dlock.locks WHERE resource = ?", a), "holding none");
        single.unlock();
        assertTrue(both.tryLock(5, TimeUnit.SECONDS));
        long[] f = both.fences();
        assertEquals(2, f.length);
        Thread.sleep(7500); // past the lease
        assertFalse(both.isLost(), "renewed together");
        assertTrue(both.check());
        CompletableFuture<LockLostException> told = new CompletableFuture<>();
        both.addLossListener(told::complete);
        TestEnv.adminQuery("SELECT dlock.break_lock(?)", b);
        told.get(20, TimeUnit.SECONDS);
        assertThrows(LockLostException.class, both::unlock);
        assertEquals(null, TestEnv.adminQuery("SELECT fence FROM dlock.locks WHERE resource = ?", a), "the other released");
        DlockException dup = assertThrows(DlockException.class, () -> DlockLock.builder(ds, List.of(a, a)).build());
        assertEquals("22023", dup.getSQLState());
    }

    @Test
    @DisplayName("registry: obtain(key) gives one Lock per key; it excludes another registry's")
    void registry() throws Exception {
        DlockLockRegistry reg = new DlockLockRegistry(ds, TestEnv.unique("reg") + ":", LEASE, null);
        DlockLockRegistry other = new DlockLockRegistry(ds, reg.obtainDlock("x").resource().replace("x", ""), LEASE, null);
        Lock x = reg.obtain("x");
        assertSame(x, reg.obtain("x"));
        x.lock();
        assertFalse(other.obtain("x").tryLock());
        assertTrue(other.obtain("y").tryLock());
        other.obtain("y").unlock();
        x.unlock();
        assertTrue(other.obtain("x").tryLock());
        other.obtain("x").unlock();
    }

    @Test
    @DisplayName("election: elected in turn, proclaim, resign; the observer sees each change; a broken leadership is lost")
    void election() throws Exception {
        String name = TestEnv.unique("elect");
        DlockElection a = new DlockElection(ds, name, Duration.ofSeconds(3));
        DlockElection b = new DlockElection(ds, name, Duration.ofSeconds(3));
        List<Optional<DlockElection.Leader>> seen = Collections.synchronizedList(new ArrayList<>());
        try (DlockElection.Observation obs = a.observe(seen::add, Duration.ofMillis(50))) {
            waitFor(() -> !seen.isEmpty());
            DlockElection.Leadership la = a.campaign("a1", Duration.ofSeconds(5)).orElseThrow();
            assertTrue(b.campaign("b1", Duration.ZERO).isEmpty(), "b is not elected while a leads");
            assertTrue(la.proclaim("a2"));
            waitFor(() -> seen.stream().anyMatch(l -> l.isPresent() && "a2".equals(l.get().value())));
            CompletableFuture<Optional<DlockElection.Leadership>> lb = CompletableFuture.supplyAsync(
                () -> b.campaign("b1", Duration.ofSeconds(20)));
            Thread.sleep(200);
            assertTrue(la.resign());
            DlockElection.Leadership bl = lb.get(30, TimeUnit.SECONDS).orElseThrow();
            assertTrue(bl.term() > la.term());
            assertEquals(b.candidate(), b.leader().orElseThrow().candidate());
            waitFor(() -> seen.stream().anyMatch(l -> l.isPresent() && "b1".equals(l.get().value())));
            CompletableFuture<LockLostException> told = new CompletableFuture<>();
            bl.addLossListener(told::complete);
            TestEnv.adminQuery("SELECT dlock.break_lock(?)", name);
            told.get(20, TimeUnit.SECONDS);
            assertTrue(bl.isLost());
            waitFor(() -> seen.get(seen.size() - 1).isEmpty());
            assertFalse(bl.resign());
        }
        assertEquals(Optional.empty(), seen.get(0), "no leader at first");
    }

    // A grant given back (its dating failed: the lease could not be read;
    // or its start: the renewals' scheduler refused it) must not take what
    // the same holder held before it.
    @Test
    @DisplayName("give back: a semaphore grant not kept leaves the permits the holder had; a fresh one is given back")
    void giveBackSemaphore() throws Exception {
        String s = TestEnv.unique("giveback-sem");
        String h = TestEnv.unique("holder");
        ScheduledExecutorService dead = Executors.newSingleThreadScheduledExecutor();
        dead.shutdown();
        DlockLock held = DlockLock.builder(ds, s).holder(h).lease(LEASE).semaphore(3, 1).build();
        held.lock();
        // Its dating fails: the lease (the server's default) is read on a connection that is refused.
        DlockLock undated = DlockLock.builder(TestEnv.failingConnection(ds, 2), s).holder(h).semaphore(3, 1).build();
        assertEquals("08001", assertThrows(DlockException.class, undated::lock).getSQLState());
        assertTrue(held.check(), "the permit the holder had is still held after a failed dating");
        // Its start fails: its renewals' scheduler is shut down.
        DlockLock unstarted = DlockLock.builder(ds, s).holder(h).lease(LEASE).semaphore(3, 1).scheduler(dead).build();
        assertThrows(RejectedExecutionException.class, unstarted::lock);
        assertTrue(held.check(), "the permit the holder had is still held after a refused start");
        assertTrue(permits(s, h) >= 1);
        held.unlock();
        assertEquals(0, permits(s, h), "its unlock gives back every permit of the holder");
        // Nothing held before: the grant is given back.
        DlockLock fresh = DlockLock.builder(TestEnv.failingConnection(ds, 2), s).holder(h).semaphore(3, 1).build();
        assertThrows(DlockException.class, fresh::lock);
        assertEquals(0, permits(s, h), "a fresh grant whose dating failed is given back");
        DlockLock fresh2 = DlockLock.builder(ds, s).holder(h).lease(LEASE).semaphore(3, 1).scheduler(dead).build();
        assertThrows(RejectedExecutionException.class, fresh2::lock);
        assertEquals(0, permits(s, h), "a fresh grant whose start failed is given back");
    }

    // The permits of HOLDER on semaphore S, unexpired (0: none).
    private static long permits(String s, String holder) throws SQLException {
        Object n = TestEnv.adminQuery("SELECT coalesce(sum(permits), 0) FROM dlock.locks"
            + " WHERE resource = ? AND holder = ? AND expires_at > clock_timestamp()", s, holder);
        return ((Number) n).longValue();
    }

    @Test
    @DisplayName("give back: a campaign not kept, by another object of the leading candidate, leaves its term")
    void giveBackCampaign() throws Exception {
        String name = TestEnv.unique("giveback-elect");
        String cand = TestEnv.unique("candidate");
        ScheduledExecutorService dead = Executors.newSingleThreadScheduledExecutor();
        dead.shutdown();
        DlockElection.Leadership leading = new DlockElection(ds, name, cand, LEASE, null)
            .campaign("v", Duration.ZERO).orElseThrow();
        // Its dating fails: the lease (the server's default) is read on a connection that is refused.
        DlockElection undated = new DlockElection(TestEnv.failingConnection(ds, 2), name, cand, null, null);
        assertEquals("08001", assertThrows(DlockException.class, () -> undated.campaign("v", Duration.ZERO)).getSQLState());
        assertEquals(Optional.of(new DlockElection.Leader(cand, "v", leading.term())), undated.leader(),
            "the term is not resigned after a failed dating");
        // Its start fails: its renewals' scheduler is shut down.
        DlockElection unstarted = new DlockElection(ds, name, cand, LEASE, dead);
        assertThrows(RejectedExecutionException.class, () -> unstarted.campaign("v", Duration.ZERO));
        assertEquals(Optional.of(new DlockElection.Leader(cand, "v", leading.term())), unstarted.leader(),
            "the term is not resigned after a refused start");
        assertFalse(leading.isLost());
        assertTrue(leading.resign());
        // Not leading before: the term is resigned.
        assertThrows(RejectedExecutionException.class, () -> unstarted.campaign("w", Duration.ZERO));
        assertEquals(Optional.empty(), unstarted.leader(), "a fresh term whose start failed is resigned");
    }

    private static void waitFor(java.util.function.BooleanSupplier cond) throws InterruptedException {
        for (int i = 0; i < 400 && !cond.getAsBoolean(); i++) Thread.sleep(50);
        assertTrue(cond.getAsBoolean(), "seen within 20 s");
    }

    @Test
    @DisplayName("renewals run on the caller's ScheduledExecutorService, every third of the lease")
    void callersScheduler() throws Exception {
        java.util.concurrent.ScheduledExecutorService mine = java.util.concurrent.Executors.newScheduledThreadPool(1,
            r -> new Thread(r, "my-renewals"));
        try {
            String r = TestEnv.unique("scheduler");
            // 6 s: each renewal opens a connection; 1.5 s left it 0.85 s (CI under load).
            DlockLock lock = DlockLock.builder(ds, r).lease(Duration.ofSeconds(6)).scheduler(mine).build();
            lock.lock();
            Object first = TestEnv.adminQuery("SELECT renewed_at FROM dlock.locks WHERE resource = ?", r);
            Thread.sleep(7500); // past the lease
            assertFalse(lock.isLost());
            assertTrue(TestEnv.liveOnServer(r), "renewed past its lease");
            assertNotEquals(first, TestEnv.adminQuery("SELECT renewed_at FROM dlock.locks WHERE resource = ?", r));
            assertTrue(((java.util.concurrent.ThreadPoolExecutor) mine).getCompletedTaskCount() >= 2,
                "on the caller's executor");
            lock.unlock();
        } finally {
            mine.shutdownNow();
        }
    }

    @Test
    @DisplayName("errors carry the SQLSTATE: the server's (22023 for a resource over 1000 bytes), the client's (22023)")
    void sqlstates() throws Exception {
        DlockLock big = new DlockLock(ds, "x".repeat(1001), LEASE);
        DlockException e = assertThrows(DlockException.class, big::lock);
        assertEquals("22023", e.getSQLState());
        assertTrue(e.getCause() instanceof SQLException);
        assertFalse(big.isHeldByCurrentThread(), "nothing held");
        assertEquals("22023", assertThrows(DlockException.class, () -> new DlockLock(ds, "")).getSQLState());
        assertEquals("22023", assertThrows(DlockException.class,
            () -> new DlockLock(ds, "r", Duration.ofSeconds(-1))).getSQLState());
        try (Connection c = ds.getConnection()) {
            assertThrows(IllegalStateException.class, () -> new DlockLock(ds, "never").assertFence(c));
        }
    }
}
