// SessionTest: sessions (dlock 1.1). One keepalive keeps every lock of a
// session (no renew sent); the session's loss is told on every lock before
// the ttl ends (keepalive backend terminated, paused, the session closed by
// an administrator; a stale fenced write refused); one lock (or multi-lock)
// broken by an administrator: lost alone, the session lives on; the server
// restarted; close and unlock; pgbouncer; attacks (a grant answered as the
// session is lost, keepalives racing close, releases racing keepalives,
// use after close, two sessions of one holder). Skipped where dlock has no
// sessions.
// Promises: P2 P16
package io.github.dlockpg.dlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Logger;
import javax.sql.DataSource;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class SessionTest {
    static boolean hasSessions() throws SQLException {
        return Boolean.TRUE.equals(TestEnv.adminQuery(
            "SELECT to_regprocedure('dlock.open_session(interval,text)') IS NOT NULL"));
    }

    static void needSessions() throws SQLException {
        assumeTrue(hasSessions(), "no sessions here: to_regprocedure('dlock.open_session(interval,text)') IS NULL");
    }

    /** The server's view of session ID: {holdings, live}, or null when there is no such session. */
    static Object[] sessionRow(long id) throws SQLException {
        try (Connection c = TestEnv.admin().getConnection();
                var ps = c.prepareStatement("SELECT holdings, expires_at > clock_timestamp() FROM dlock.sessions WHERE id = ?")) {
            ps.setLong(1, id);
            try (var rs = ps.executeQuery()) {
                return rs.next() ? new Object[] {rs.getLong(1), rs.getBoolean(2)} : null;
            }
        }
    }

    /**
     * A DataSource that counts what is sent (renew, keepalive) and injects
     * faults: renewals or keepalives refused (as a lost connection),
     * keepalives sent late (a seeded random delay), the answer of an
     * acquisition held back until a latch opens.
     */
    static final class Watched implements DataSource {
        final DataSource real;
        final AtomicInteger renews = new AtomicInteger();
        final AtomicInteger keepalives = new AtomicInteger();
        volatile boolean failKeepalives;
        volatile boolean failRenews;
        volatile Random delayKeepalives; // up to 300 ms before each is sent
        volatile CountDownLatch holdGrants;
        final CountDownLatch granted = new CountDownLatch(1);

        Watched(DataSource real) {
            this.real = real;
        }

        @Override
        public Connection getConnection() throws SQLException {
            Connection c = real.getConnection();
            return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class},
                (p, m, a) -> {
                    Object out = call(c, m, a);
                    if (m.getName().equals("prepareStatement") && a.length == 1) return statement((PreparedStatement) out, (String) a[0]);
                    return out;
                });
        }

        private PreparedStatement statement(PreparedStatement ps, String sql) {
            return (PreparedStatement) Proxy.newProxyInstance(PreparedStatement.class.getClassLoader(),
                new Class<?>[] {PreparedStatement.class}, (p, m, a) -> {
                    if (!m.getName().equals("executeQuery")) return call(ps, m, a);
                    if (sql.contains("dlock.renew(")) {
                        renews.incrementAndGet();
                        if (failRenews) throw new SQLException("injected: connection lost", "08006");
                    }
                    if (sql.contains("dlock.keepalive(")) {
                        keepalives.incrementAndGet();
                        if (failKeepalives) throw new SQLException("injected: connection lost", "08006");
                        Random delay = delayKeepalives;
                        if (delay != null) {
                            int ms;
                            synchronized (delay) {
                                ms = delay.nextInt(300);
                            }
                            Thread.sleep(ms);
                        }
                    }
                    Object rs = call(ps, m, a);
                    CountDownLatch hold = holdGrants;
                    if (hold != null && sql.contains("dlock.lock(")) {
                        granted.countDown();
                        hold.await();
                    }
                    return rs;
                });
        }

        private static Object call(Object target, java.lang.reflect.Method m, Object[] a) throws Throwable {
            try {
                return m.invoke(target, a);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        }

        @Override
        public Connection getConnection(String u, String p) {
            throw new UnsupportedOperationException();
        }

        @Override
        public java.io.PrintWriter getLogWriter() {
            return null;
        }

        @Override
        public void setLogWriter(java.io.PrintWriter out) {}

        @Override
        public void setLoginTimeout(int seconds) {}

        @Override
        public int getLoginTimeout() {
            return 0;
        }

        @Override
        public Logger getParentLogger() {
            return Logger.getGlobal();
        }

        @Override
        public <T> T unwrap(Class<T> iface) {
            throw new UnsupportedOperationException();
        }

        @Override
        public boolean isWrapperFor(Class<?> iface) {
            return false;
        }
    }

    /** N exclusive locks in S, and one of each other kind (N + 4 holdings): all taken. */
    static List<DlockLock> takeMany(DlockSession s, int n, List<CompletableFuture<LockLostException>> told) {
        List<DlockLock> locks = new ArrayList<>();
        for (int i = 0; i < n + 3; i++) {
            DlockLock.Builder b = i == n ? s.lockBuilder(TestEnv.unique("shared")).shared(true)
                : i == n + 1 ? s.lockBuilder(TestEnv.unique("sem")).semaphore(3, 2)
                : i == n + 2 ? s.lockBuilder(List.of(TestEnv.unique("all-a"), TestEnv.unique("all-b")))
                : s.lockBuilder(TestEnv.unique("in-session"));
            if (told != null) {
                CompletableFuture<LockLostException> f = new CompletableFuture<>();
                told.add(f);
                b.onLost(f::complete);
            }
            DlockLock l = b.build();
            assertTrue(l.tryLock(), "taken in the session");
            assertEquals(s, l.session());
            assertEquals(s.holder(), l.holder());
            locks.add(l);
        }
        return locks;
    }

    @Test
    @DisplayName("one keepalive keeps every lock (no renew sent); unlock of one leaves the rest; close releases all")
    void oneKeepaliveKeepsMany() throws Exception {
        needSessions();
        Watched ds = new Watched(TestEnv.app());
        // 6 s: each keepalive opens a connection; 1.5 s left it 0.85 s (CI under load).
        DlockSession s = DlockSession.open(ds, Duration.ofSeconds(6));
        List<DlockLock> locks = takeMany(s, 6, null);
        DlockElection.Leadership lead = s.election(TestEnv.unique("elect")).campaign("v", Duration.ZERO).orElseThrow();
        Thread.sleep(8000); // past the ttl
        for (DlockLock l : locks) assertFalse(l.isLost(), l.resource());
        assertFalse(lead.isLost());
        assertEquals(0, ds.renews.get(), "no renew in a session");
        assertTrue(ds.keepalives.get() >= 2, "keepalives sent: " + ds.keepalives.get());
        assertEquals(11L, sessionRow(s.id())[0]);
        assertEquals(true, sessionRow(s.id())[1]);
        locks.get(0).unlock();
        assertEquals(10L, sessionRow(s.id())[0]);
        for (DlockLock l : locks.subList(1, locks.size())) assertTrue(l.isHeld(), l.resource());
        s.close();
        assertFalse(s.isOpen());
        assertFalse(s.isLost());
        Object left = TestEnv.adminQuery("SELECT count(*) FROM dlock.locks WHERE session = ?", s.id());
        assertEquals(0L, ((Number) left).longValue());
        for (DlockLock l : locks.subList(1, locks.size())) {
            assertFalse(l.isHeld());
            assertFalse(l.isLost());
            l.unlock(); // the owner's unlock after close: nothing to give back
        }
        DlockLock other = new DlockLock(TestEnv.app(), locks.get(1).resource(), Duration.ofSeconds(5));
        assertTrue(other.tryLock(), "free after close");
        other.unlock();
        s.close(); // twice: nothing
    }

    /**
     * Waits (bounded) for every lock's loss; the session's listener must have
     * been told before END (its ttl's end on the server, read once no
     * keepalive could land).
     */
    private static void lossBeforeEnd(DlockSession s, List<DlockLock> locks, List<CompletableFuture<LockLostException>> told,
            TestEnv.LossClock clock, long end) throws Exception {
        TestEnv.assertToldBefore(clock, end, () -> TestEnv.sessionEndMs(s.id()));
        for (CompletableFuture<LockLostException> f : told) assertNotNull(f.get(10, TimeUnit.SECONDS));
        for (DlockLock l : locks) assertTrue(l.isLost(), l.resource());
        assertTrue(s.isLost());
    }

    @Test
    @DisplayName("keepalive backend terminated: reconnects and keeps; with no reconnect every lock lost before the ttl's end")
    void keepaliveBackendTerminated() throws Exception {
        needSessions();
        String app = "dlock-java-sess-" + TestEnv.unique("kill").hashCode();
        TestEnv.OneConnection re = new TestEnv.OneConnection(TestEnv.app(app), true);
        // 6 s: the keepalive after the kill opens a connection; 3 s left it 1.7 s (CI under load).
        DlockSession kept = DlockSession.open(re, Duration.ofSeconds(6));
        List<DlockLock> k = takeMany(kept, 2, null);
        TestEnv.adminQuery("SELECT pg_terminate_backend(?)", TestEnv.backendPid(app));
        Thread.sleep(8000); // past the ttl
        assertTrue(kept.isOpen(), "kept");
        for (DlockLock l : k) assertTrue(l.check());
        kept.close();
        re.closeReally();

        String app2 = app + "-b";
        TestEnv.OneConnection once = new TestEnv.OneConnection(TestEnv.app(app2), false);
        TestEnv.LossClock clock = new TestEnv.LossClock();
        DlockSession lost = DlockSession.builder(once).ttl(Duration.ofSeconds(3)).open();
        lost.addLossListener(clock);
        List<CompletableFuture<LockLostException>> told = new ArrayList<>();
        List<DlockLock> locks = takeMany(lost, 2, told);
        TestEnv.adminQuery("SELECT pg_terminate_backend(?)", TestEnv.backendPid(app2));
        lossBeforeEnd(lost, locks, told, clock, TestEnv.sessionEndMs(lost.id()));
        assertThrows(LockLostException.class, lost::close);
        for (DlockLock l : locks) assertThrows(LockLostException.class, l::unlock);
    }

    @Test
    @DisplayName("keepalive backend paused (SIGSTOP): every lock lost before the ttl's end on the server")
    void keepaliveBackendPaused() throws Exception {
        needSessions();
        String app = "dlock-java-sess-" + TestEnv.unique("stop").hashCode();
        TestEnv.OneConnection ds = new TestEnv.OneConnection(TestEnv.app(app), false);
        DlockSession s = DlockSession.open(ds, Duration.ofSeconds(3));
        TestEnv.LossClock clock = new TestEnv.LossClock();
        s.addLossListener(clock);
        List<CompletableFuture<LockLostException>> told = new ArrayList<>();
        List<DlockLock> locks = takeMany(s, 2, told);
        int pid = TestEnv.backendPid(app);
        TestEnv.pauseIdle(pid);
        try {
            lossBeforeEnd(s, locks, told, clock, TestEnv.sessionEndMs(s.id()));
        } finally {
            TestEnv.signal("CONT", pid);
        }
    }

    @Test
    @DisplayName("session closed by an administrator: every lock lost; a stale lock's fenced write refused (55P03)")
    void closedByAdministrator() throws Exception {
        needSessions();
        DlockSession s = DlockSession.open(TestEnv.app(), Duration.ofSeconds(3));
        List<CompletableFuture<LockLostException>> told = new ArrayList<>();
        List<DlockLock> locks = takeMany(s, 2, told);
        assertEquals(6, ((Number) TestEnv.adminQuery("SELECT dlock.close_session(?)", s.id())).intValue());
        for (CompletableFuture<LockLostException> f : told) assertNotNull(f.get(10, TimeUnit.SECONDS));
        DlockLock stale = locks.get(0);
        assertTrue(stale.isLost());
        DlockLock fresh = new DlockLock(TestEnv.app(), stale.resource(), Duration.ofSeconds(10));
        assertTrue(fresh.tryLock(5, TimeUnit.SECONDS));
        try (Connection c = TestEnv.app().getConnection()) {
            c.setAutoCommit(false);
            SQLException refused = assertThrows(SQLException.class, () -> stale.assertFence(c));
            assertEquals("55P03", refused.getSQLState());
            c.rollback();
        }
        fresh.unlock();
        assertThrows(LockLostException.class, stale::unlock);
        assertThrows(LockLostException.class, s::close);
    }

    @Test
    @DisplayName("server stopped and restarted within the ttl: keepalives retried, the session and its locks kept")
    void serverRestart() throws Exception {
        String pgCtl = TestEnv.env("DLOCK_TEST_PG_CTL", null);
        assumeTrue(pgCtl != null, "DLOCK_TEST_PG_CTL (pg_ctl -D DATADIR -l LOG) unset");
        needSessions();
        long ttl = 12_000, start = System.currentTimeMillis();
        DlockSession s = DlockSession.open(TestEnv.app(), Duration.ofMillis(ttl));
        List<DlockLock> locks = takeMany(s, 1, null);
        Thread.sleep(1000);
        // Down past the keepalive due a third of the ttl after the open.
        TestEnv.restartWithin(pgCtl, ttl, start + ttl / 3, () -> TestEnv.sessionExpiryMs(s.id()));
        assertTrue(s.isOpen(), "kept");
        for (DlockLock l : locks) assertTrue(l.check(), l.resource());
        s.close();
    }

    @Test
    @DisplayName("pgbouncer (transaction pooling): the session kept past two ttls, closed")
    void throughBouncer() throws Exception {
        DataSource b = TestEnv.bouncer();
        assumeTrue(b != null, "pgbouncer is not installed");
        needSessions();
        // 6 s: each keepalive opens a connection to pgbouncer and waits for a
        // server connection; 1.5 s left it 0.85 s (CI under load).
        DlockSession s = DlockSession.builder(b).ttl(Duration.ofSeconds(6)).holder(TestEnv.unique("bouncer")).open();
        List<DlockLock> locks = takeMany(s, 2, null);
        Thread.sleep(8000); // past the ttl
        assertTrue(s.isOpen());
        assertEquals(6L, sessionRow(s.id())[0]);
        locks.get(0).unlock();
        s.close();
        assertNull(TestEnv.adminQuery("SELECT fence FROM dlock.locks WHERE resource = ?", locks.get(1).resource()));
    }

    @Test
    @DisplayName("dlock 1.0 (no open_session): opening a session fails with 42883 and says why")
    void oldServer() throws Exception {
        assumeTrue(!hasSessions(), "this server has sessions (dlock.open_session(interval,text) exists)");
        DlockException e = assertThrows(DlockException.class, () -> DlockSession.open(TestEnv.app(), Duration.ofSeconds(1)));
        assertEquals("42883", e.getSQLState());
        assertTrue(e.getMessage().contains("no sessions"), e.getMessage());
    }

    @Test
    @DisplayName("attack: use after close, bad arguments")
    void misuse() throws Exception {
        needSessions();
        DlockSession s = DlockSession.open(TestEnv.app(), null);
        assertEquals(Duration.ofSeconds(30), s.ttl());
        assertEquals("22023", assertThrows(DlockException.class,
            () -> s.lockBuilder("x").lease(Duration.ofSeconds(1)).build()).getSQLState());
        assertEquals("22023", assertThrows(DlockException.class,
            () -> s.lockBuilder("x").holder("someone-else").build()).getSQLState());
        DlockLock l = s.lock(TestEnv.unique("after"));
        DlockElection e = s.election(TestEnv.unique("after-elect"));
        s.close();
        assertEquals("55000", assertThrows(DlockException.class, l::tryLock).getSQLState());
        assertEquals("55000", assertThrows(DlockException.class, () -> e.campaign("v", Duration.ZERO)).getSQLState());
        assertFalse(l.isHeldByCurrentThread());
        s.close();
        DlockLockRegistry reg = new DlockLockRegistry(s, "p:");
        assertThrows(DlockException.class, () -> reg.obtain("k").tryLock());
    }

    @Test
    @DisplayName("registry in a session: its locks are the session's")
    void registryInSession() throws Exception {
        needSessions();
        try (DlockSession s = DlockSession.open(TestEnv.app(), Duration.ofSeconds(5))) {
            DlockLockRegistry reg = new DlockLockRegistry(s, TestEnv.unique("reg") + ":");
            DlockLock a = reg.obtainDlock("a");
            assertTrue(a.tryLock());
            assertEquals(s, a.session());
            assertEquals(1L, sessionRow(s.id())[0]);
            a.unlock();
            assertEquals(0L, sessionRow(s.id())[0]);
        }
    }

    @Test
    @DisplayName("attack: an acquisition answered just after the session was lost yields no live-looking lock")
    void grantAsLost() throws Exception {
        needSessions();
        Watched ds = new Watched(TestEnv.app());
        DlockSession s = DlockSession.open(ds, Duration.ofSeconds(2));
        String r = TestEnv.unique("late-grant");
        CompletableFuture<LockLostException> told = new CompletableFuture<>();
        DlockLock l = s.lockBuilder(r).onLost(told::complete).build();
        CountDownLatch hold = new CountDownLatch(1);
        ds.holdGrants = hold;
        ds.failKeepalives = true;
        CompletableFuture<Object> got = CompletableFuture.supplyAsync(() -> {
            try {
                return l.tryLock();
            } catch (RuntimeException e) {
                return e;
            }
        });
        assertTrue(ds.granted.await(10, TimeUnit.SECONDS), "the grant was answered");
        for (int i = 0; i < 200 && !s.isLost(); i++) Thread.sleep(50);
        assertTrue(s.isLost(), "the session was declared lost while its keepalives failed");
        hold.countDown();
        Object out = got.get(20, TimeUnit.SECONDS);
        if (Boolean.TRUE.equals(out)) {
            assertTrue(l.isLost(), "a lock granted as its session was lost looks held");
            assertNotNull(told.get(10, TimeUnit.SECONDS), "its loss listener told");
        } else assertTrue(out instanceof DlockException, "the late grant: " + out);
        assertFalse(l.isHeld());
    }

    @Test
    @DisplayName("attack: keepalives racing close (seeded delays): close wins cleanly, every lock released")
    void keepaliveRacesClose() throws Exception {
        needSessions();
        long seed = System.nanoTime();
        System.out.println("# keepaliveRacesClose seed " + seed);
        Random rng = new Random(seed);
        for (int i = 0; i < 10; i++) {
            // ttl 6 s: a keepalive every 2 s, due or in flight at the
            // close; each opens a connection, and a shorter ttl (2 s: 1.1 s
            // for it) is lost on a loaded machine.
            DlockSession s = DlockSession.open(TestEnv.app(), Duration.ofSeconds(6));
            DlockLock a = s.lock(TestEnv.unique("race-a"));
            DlockLock b = s.lock(TestEnv.unique("race-b"));
            assertTrue(a.tryLock());
            assertTrue(b.tryLock());
            Thread.sleep(rng.nextInt(4200));
            CompletableFuture<Void> other = CompletableFuture.runAsync(s::close);
            s.close();
            other.get(20, TimeUnit.SECONDS);
            assertFalse(a.isLost(), "seed " + seed);
            assertFalse(a.isHeld());
            assertFalse(TestEnv.liveOnServer(a.resource()), "seed " + seed + ": still held after close");
            a.unlock();
            b.unlock();
        }
    }

    @Test
    @DisplayName("attack: two sessions of one holder: neither takes the other's holding; closing one leaves the other")
    void twoSessionsOneHolder() throws Exception {
        needSessions();
        String h = TestEnv.unique("holder");
        DlockSession s1 = DlockSession.builder(TestEnv.app()).ttl(Duration.ofSeconds(5)).holder(h).open();
        DlockSession s2 = DlockSession.builder(TestEnv.app()).ttl(Duration.ofSeconds(5)).holder(h).open();
        String r = TestEnv.unique("two");
        DlockLock l1 = s1.lock(r);
        assertTrue(l1.tryLock());
        DlockLock l2 = s2.lock(r);
        CompletableFuture<Object> second = CompletableFuture.supplyAsync(() -> {
            try {
                return l2.tryLock();
            } catch (RuntimeException e) {
                return e;
            }
        });
        assertFalse(Boolean.TRUE.equals(second.get(20, TimeUnit.SECONDS)), "the second session got it too");
        DlockLock mine = s2.lock(TestEnv.unique("two-other"));
        assertTrue(mine.tryLock());
        s2.close();
        assertFalse(mine.isHeld());
        assertTrue(l1.check());
        assertTrue(l1.isHeld());
        l1.unlock();
        s1.close();
    }

    @Test
    @DisplayName("lock broken by an administrator in a live session: lost within 2.5 ttl, taken by another; the session and its other lock kept")
    void brokenInSession() throws Exception {
        needSessions();
        // 6 s: each keepalive opens a connection; 2 s left it 1.1 s (CI under load).
        Duration ttl = Duration.ofSeconds(6);
        DlockSession s = DlockSession.open(TestEnv.app(), ttl);
        CompletableFuture<LockLostException> sessionTold = new CompletableFuture<>();
        s.addLossListener(sessionTold::complete);
        CompletableFuture<LockLostException> toldA = new CompletableFuture<>();
        CompletableFuture<LockLostException> toldB = new CompletableFuture<>();
        DlockLock a = s.lockBuilder(TestEnv.unique("broken-a")).onLost(toldA::complete).build();
        DlockLock b = s.lockBuilder(TestEnv.unique("broken-b")).onLost(toldB::complete).build();
        assertTrue(a.tryLock());
        assertTrue(b.tryLock());
        long start = System.nanoTime();
        assertEquals(Boolean.TRUE, TestEnv.adminQuery("SELECT dlock.break_lock(?)", a.resource()));
        LockLostException why = toldA.get(30, TimeUnit.SECONDS);
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        assertTrue(ms < ttl.toMillis() * 5 / 2, "the loss was told " + ms + " ms after the break");
        assertEquals(a.resource(), why.resource());
        assertEquals(a.fence(), why.fence());
        assertTrue(why.getMessage().contains("broken"), why.getMessage());
        assertTrue(a.isLost());
        assertFalse(a.isHeld());
        DlockLock other = new DlockLock(TestEnv.app(), a.resource(), Duration.ofSeconds(10));
        assertTrue(other.tryLock(5, TimeUnit.SECONDS), "another holder takes it");
        Thread.sleep(ttl.toMillis()); // more keepalives: the session and b live on
        assertTrue(s.isOpen());
        assertFalse(sessionTold.isDone(), "the session was not lost");
        assertTrue(b.isHeld());
        assertFalse(toldB.isDone(), "b was not lost");
        assertTrue(b.check());
        assertThrows(LockLostException.class, a::unlock);
        assertTrue(other.check(), "a's unlock left the new holder alone");
        other.unlock();
        b.unlock();
        s.close();
    }

    @Test
    @DisplayName("a multi-lock in a session with one of its resources broken: lost; its unlock gives the other back; the session kept")
    void multiBrokenInSession() throws Exception {
        needSessions();
        // 6 s: each keepalive opens a connection; 2 s left it 1.1 s (CI under load).
        DlockSession s = DlockSession.open(TestEnv.app(), Duration.ofSeconds(6));
        String r1 = TestEnv.unique("multi-a");
        String r2 = TestEnv.unique("multi-b");
        CompletableFuture<LockLostException> told = new CompletableFuture<>();
        DlockLock all = s.lockBuilder(List.of(r1, r2)).onLost(told::complete).build();
        DlockLock single = s.lock(TestEnv.unique("multi-other"));
        assertTrue(all.tryLock());
        assertTrue(single.tryLock());
        assertEquals(Boolean.TRUE, TestEnv.adminQuery("SELECT dlock.break_lock(?)", r2));
        LockLostException why = told.get(30, TimeUnit.SECONDS);
        assertEquals(r1 + ", " + r2, why.resource());
        assertTrue(all.isLost());
        assertTrue(s.isOpen());
        assertTrue(single.isHeld());
        assertThrows(LockLostException.class, all::unlock);
        assertFalse(TestEnv.liveOnServer(r1), "the lost multi-lock's unlock gave its other resource back");
        assertTrue(single.check());
        s.close();
    }

    @Test
    @DisplayName("attack: releases racing keepalives (seeded delays): a released lock is never reported lost")
    void releaseRacesKeepalive() throws Exception {
        needSessions();
        long seed = System.nanoTime();
        System.out.println("# releaseRacesKeepalive seed " + seed);
        Random rng = new Random(seed);
        Watched ds = new Watched(TestEnv.app());
        ds.delayKeepalives = new Random(seed + 1); // the arrays built, then a wait before the keepalive is sent
        // ttl 3 s: a keepalive every second, late by up to 0.3 s; a loaded machine keeps it.
        DlockSession s = DlockSession.open(ds, Duration.ofSeconds(3));
        DlockLock kept = s.lock(TestEnv.unique("race-kept"));
        assertTrue(kept.tryLock());
        int before = ds.keepalives.get();
        List<CompletableFuture<LockLostException>> told = new ArrayList<>();
        for (int i = 0; i < 60; i++) {
            CompletableFuture<LockLostException> f = new CompletableFuture<>();
            told.add(f);
            DlockLock l = s.lockBuilder(TestEnv.unique("race-release")).onLost(f::complete).build();
            assertTrue(l.tryLock(), "seed " + seed);
            Thread.sleep(rng.nextInt(150));
            try {
                l.unlock();
            } catch (LockLostException e) {
                throw new AssertionError("seed " + seed + ": round " + i + ": reported lost at unlock", e);
            }
        }
        Thread.sleep(1500); // the keepalives in flight answered
        for (CompletableFuture<LockLostException> f : told)
            assertFalse(f.isDone(), "seed " + seed + ": a released lock reported lost: " + f.getNow(null));
        assertTrue(ds.keepalives.get() - before >= 3, "keepalives raced: " + (ds.keepalives.get() - before));
        assertTrue(s.isOpen());
        assertTrue(kept.isHeld());
        s.close();
    }
}
