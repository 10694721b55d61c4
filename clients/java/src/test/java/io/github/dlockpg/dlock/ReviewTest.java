// ReviewTest: a review's attacks (stop 57), kept as tests: renewals that
// hang (a server that stops answering) hold up no other lock's renewal;
// observers whose listeners block (campaigning) hold up no renewal; an
// unlock() that did not get through is sent again by the next lock();
// leases too long for a Duration's nanoseconds.
// Promises: P16
package io.github.dlockpg.dlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class ReviewTest {
    /** REAL, whose getConnection blocks while STUCK is set (until OPEN counts down), as a black-holed server's does. */
    private static DataSource stuckWhen(DataSource real, AtomicBoolean stuck, CountDownLatch open) {
        return (DataSource) Proxy.newProxyInstance(DataSource.class.getClassLoader(), new Class<?>[] {DataSource.class},
            (p, m, a) -> {
                if (m.getName().equals("getConnection") && stuck.get()) open.await();
                try {
                    return m.invoke(real, a);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
            });
    }

    /** REAL, whose getConnection fails as an unreachable server's does (08001) while DOWN is set. */
    private static DataSource refusingWhen(DataSource real, AtomicBoolean down) {
        return (DataSource) Proxy.newProxyInstance(DataSource.class.getClassLoader(), new Class<?>[] {DataSource.class},
            (p, m, a) -> {
                if (m.getName().equals("getConnection") && down.get())
                    throw new SQLException("injected: connection refused", "08001");
                try {
                    return m.invoke(real, a);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
            });
    }

    @Test
    @DisplayName("eight locks whose renewals hang: another lock's renewals still get through")
    void hungRenewalsHoldUpNoOther() throws Exception {
        AtomicBoolean stuck = new AtomicBoolean();
        CountDownLatch open = new CountDownLatch(1);
        DataSource bad = stuckWhen(TestEnv.app(), stuck, open);
        List<DlockLock> hung = new ArrayList<>();
        try {
            for (int i = 0; i < 8; i++) {
                DlockLock l = DlockLock.builder(bad, TestEnv.unique("hung")).lease(Duration.ofMillis(1500)).build();
                assertTrue(l.tryLock());
                hung.add(l);
            }
            stuck.set(true);
            String r = TestEnv.unique("healthy");
            // 6 s: each renewal opens a connection; 2 s left it 1.1 s (CI under load).
            DlockLock healthy = DlockLock.builder(TestEnv.app(), r).lease(Duration.ofSeconds(6)).build();
            Thread.sleep(600); // the hung locks' first renewals are under way
            assertTrue(healthy.tryLock());
            try {
                Thread.sleep(8000); // more than one of its leases
                assertTrue(healthy.isHeld(), "the healthy lock was lost: its renewals waited behind hung ones");
                assertTrue(TestEnv.liveOnServer(r));
            } finally {
                healthy.unlock();
            }
        } finally {
            open.countDown();
        }
        for (DlockLock l : hung) assertFalse(l.isHeld(), "a lock whose renewals hung still says held");
    }

    @Test
    @DisplayName("observers whose listeners block: a lock's renewals still get through")
    void blockingObserversHoldUpNoRenewal() throws Exception {
        String name = TestEnv.unique("observed");
        DlockElection leader = new DlockElection(TestEnv.app(), name, Duration.ofSeconds(30));
        var term = leader.campaign("leader", Duration.ZERO).orElseThrow();
        CountDownLatch release = new CountDownLatch(1);
        AtomicInteger told = new AtomicInteger();
        List<DlockElection.Observation> obs = new ArrayList<>();
        try {
            for (int i = 0; i < 6; i++) {
                DlockElection e = new DlockElection(TestEnv.app(), name, Duration.ofSeconds(30));
                obs.add(e.observe(now -> {
                    told.incrementAndGet();
                    try {
                        release.await(); // as a listener that campaigns and waits
                    } catch (InterruptedException x) {
                        Thread.currentThread().interrupt();
                    }
                }, Duration.ofMillis(50)));
            }
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (told.get() < 6 && System.nanoTime() < until) Thread.sleep(20);
            assertEquals(6, told.get(), "every observer was told the leader");
            String r = TestEnv.unique("renewed");
            // 6 s: each renewal opens a connection; 2 s left it 1.1 s (CI under load).
            DlockLock l = DlockLock.builder(TestEnv.app(), r).lease(Duration.ofSeconds(6)).build();
            assertTrue(l.tryLock());
            try {
                Thread.sleep(8000); // more than one of its leases
                assertTrue(l.isHeld(), "lost while observers' listeners blocked: its renewals waited behind them");
            } finally {
                l.unlock();
            }
        } finally {
            release.countDown();
            for (var o : obs) o.close();
            term.resign();
        }
    }

    @Test
    @DisplayName("an unlock() that did not get through: the next lock() sends it again, then takes a new holding")
    void failedUnlockThenLock() throws Exception {
        String r = TestEnv.unique("failedunlock");
        AtomicBoolean down = new AtomicBoolean();
        DataSource ds = refusingWhen(TestEnv.app(), down);
        DlockLock lock = DlockLock.builder(ds, r).lease(Duration.ofSeconds(3)).build();
        assertTrue(lock.tryLock());
        long first = lock.fence();
        down.set(true); // the unlock and its retry get no connection
        assertThrows(DlockException.class, lock::unlock);
        down.set(false);
        assertTrue(TestEnv.liveOnServer(r), "the failed unlock released it after all");
        AtomicInteger lost = new AtomicInteger();
        lock.addLossListener(e -> lost.incrementAndGet());
        assertTrue(lock.tryLock());
        try {
            assertNotEquals(first, lock.fence(), "a re-entry of the holding the failed unlock left");
            Thread.sleep(3500); // past the old holding's deadline
            assertTrue(lock.isHeld());
            assertEquals(0, lost.get(), "a loss was told while the lock was held");
        } finally {
            lock.unlock();
        }
        assertFalse(TestEnv.liveOnServer(r), "held on the server after unlock()");
    }

    @Test
    @DisplayName("a 300-year lease: taken, held and released (no overflow)")
    void centuriesLongLease() throws Exception {
        String r = TestEnv.unique("centuries");
        DlockLock lock = DlockLock.builder(TestEnv.app(), r).lease(Duration.ofDays(365L * 300)).build();
        assertTrue(lock.tryLock());
        try {
            assertTrue(lock.isHeld());
            assertTrue(TestEnv.liveOnServer(r));
        } finally {
            lock.unlock();
        }
        assertFalse(TestEnv.liveOnServer(r));
        if (!SessionTest.hasSessions()) return;
        try (DlockSession s = DlockSession.builder(TestEnv.app()).ttl(Duration.ofDays(365L * 300)).open()) {
            assertTrue(s.isOpen());
        }
    }
}
