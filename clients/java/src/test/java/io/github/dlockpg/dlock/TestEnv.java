// TestEnv: what the tests share: DataSources on the test server (PGHOST,
// PGPORT, PGUSER, PGDATABASE), the administrator's (DLOCK_TEST_ADMIN_USER,
// a superuser: break_lock, pg_terminate_backend), pgbouncer's
// (DLOCK_TEST_BOUNCER_PORT, transaction pooling), DataSources that hand
// out one connection (to pause or kill "the renewal backend"), one
// whose Nth connection is refused, and one whose acquisitions the server
// rolls back (40001).
package io.github.dlockpg.dlock;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.postgresql.ds.PGSimpleDataSource;

final class TestEnv {
    private TestEnv() {}

    private static final AtomicInteger N = new AtomicInteger();

    static String env(String k, String dflt) {
        String v = System.getenv(k);
        return v == null || v.isEmpty() ? dflt : v;
    }

    static boolean portable() {
        return "portable".equals(env("DLOCK_TEST_EDITION", ""));
    }

    /** A resource name of its own for each use. */
    static String unique(String what) {
        return "java-test:" + what + ":" + ProcessHandle.current().pid() + ":" + N.incrementAndGet();
    }

    static PGSimpleDataSource ds(String user, String appName) {
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setServerNames(new String[] {env("PGHOST", "127.0.0.1")});
        ds.setPortNumbers(new int[] {Integer.parseInt(env("PGPORT", "5432"))});
        ds.setDatabaseName(env("PGDATABASE", "postgres"));
        ds.setUser(user);
        if (appName != null) ds.setApplicationName(appName);
        return ds;
    }

    static DataSource app() {
        return ds(env("PGUSER", System.getProperty("user.name")), null);
    }

    static DataSource app(String appName) {
        return ds(env("PGUSER", System.getProperty("user.name")), appName);
    }

    static DataSource admin() {
        return ds(env("DLOCK_TEST_ADMIN_USER", env("PGUSER", System.getProperty("user.name"))), null);
    }

    /** pgbouncer's DataSource (no server-side prepared statements), or null. */
    static DataSource bouncer() {
        String port = env("DLOCK_TEST_BOUNCER_PORT", null);
        if (port == null) return null;
        PGSimpleDataSource ds = ds(env("PGUSER", System.getProperty("user.name")), null);
        ds.setServerNames(new String[] {"127.0.0.1"});
        ds.setPortNumbers(new int[] {Integer.parseInt(port)});
        ds.setPrepareThreshold(0);
        ds.setSslMode("disable");
        return ds;
    }

    /** The first column of the first row of SQL as the administrator (null: no row). */
    static Object adminQuery(String sql, Object... args) throws SQLException {
        try (Connection c = admin().getConnection(); var ps = c.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) ps.setObject(i + 1, args[i]);
            try (ResultSet rs = ps.executeQuery()) {
                return rs.next() ? rs.getObject(1) : null;
            }
        }
    }

    static void adminExec(String sql) throws SQLException {
        try (Connection c = admin().getConnection(); Statement s = c.createStatement()) {
            s.execute(sql);
        }
    }

    /**
     * A DataSource with one connection, handed out again and again (close()
     * keeps it open): RECONNECT makes a new one once it is closed or broken
     * (a pool of one that validates); else the dead one is handed out.
     */
    static final class OneConnection implements DataSource {
        private final DataSource real;
        private final boolean reconnect;
        private Connection conn;

        OneConnection(DataSource real, boolean reconnect) {
            this.real = real;
            this.reconnect = reconnect;
        }

        @Override
        public synchronized Connection getConnection() throws SQLException {
            if (conn == null || (reconnect && !conn.isValid(1))) {
                if (conn != null) conn.close();
                conn = real.getConnection();
            }
            Connection c = conn;
            return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(),
                new Class<?>[] {Connection.class}, (p, m, a) -> {
                    if (m.getName().equals("close")) return null;
                    try {
                        return m.invoke(c, a);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
        }

        synchronized void closeReally() throws SQLException {
            if (conn != null) conn.close();
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
        public java.util.logging.Logger getParentLogger() {
            return java.util.logging.Logger.getGlobal();
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

    /**
     * REAL, but its getConnection number N (from 1) fails as an unreachable
     * server would (08001): the statement that needed it is not sent.
     */
    static DataSource failingConnection(DataSource real, int n) {
        AtomicInteger calls = new AtomicInteger();
        return (DataSource) Proxy.newProxyInstance(DataSource.class.getClassLoader(), new Class<?>[] {DataSource.class},
            (p, m, a) -> {
                if (m.getName().equals("getConnection") && (a == null || a.length == 0) && calls.incrementAndGet() == n)
                    throw new SQLException("injected: connection refused", "08001");
                try {
                    return m.invoke(real, a);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
            });
    }

    /**
     * REAL, whose acquiring statements (dlock.try_lock, lock, acquire,
     * lock_all, campaign) are rolled back by the server with 40001, as a
     * serializable caller's conflict with another does, while ARMED is
     * above zero (one less each): a statement raising it (after SLEEP_MS,
     * if set) runs on the same connection in their place. SENT counts the
     * acquiring statements sent, rolled back or not.
     */
    static final class RollingBack {
        static final String RAISE = "DO $$BEGIN PERFORM pg_sleep_for(interval '%s milliseconds');"
            + " RAISE EXCEPTION 'conflict (test)' USING ERRCODE = 'serialization_failure'; END$$";
        final AtomicInteger armed = new AtomicInteger();
        final AtomicInteger sent = new AtomicInteger();
        volatile long sleepMs;
        final DataSource ds;

        RollingBack(DataSource real) {
            ds = (DataSource) Proxy.newProxyInstance(DataSource.class.getClassLoader(), new Class<?>[] {DataSource.class},
                (p, m, a) -> {
                    Object out = call(real, m, a);
                    return m.getName().equals("getConnection") ? connection((Connection) out) : out;
                });
        }

        /** The next N acquiring statements are rolled back; SENT from 0. */
        RollingBack arm(int n) {
            sent.set(0);
            armed.set(n);
            return this;
        }

        static boolean acquiring(String sql) {
            for (String f : new String[] {"dlock.try_lock(", "dlock.lock(", "dlock.acquire(", "dlock.lock_all(",
                    "dlock.campaign("}) {
                if (sql.contains(f)) return true;
            }
            return false;
        }

        private Connection connection(Connection c) {
            return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class},
                (p, m, a) -> {
                    Object out = call(c, m, a);
                    if (m.getName().equals("prepareStatement") && a != null && a.length == 1 && acquiring((String) a[0]))
                        return statement(c, (PreparedStatement) out);
                    return out;
                });
        }

        private PreparedStatement statement(Connection c, PreparedStatement ps) {
            return (PreparedStatement) Proxy.newProxyInstance(PreparedStatement.class.getClassLoader(),
                new Class<?>[] {PreparedStatement.class}, (p, m, a) -> {
                    if (!m.getName().equals("executeQuery") || (a != null && a.length > 0)) return call(ps, m, a);
                    sent.incrementAndGet();
                    if (armed.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
                        try (Statement s = c.createStatement()) {
                            s.execute(RAISE.replace("%s", Long.toString(sleepMs)));
                        }
                        throw new AssertionError("the statement raising 40001 did not");
                    }
                    return call(ps, m, a);
                });
        }

        private static Object call(Object target, java.lang.reflect.Method m, Object[] a) throws Throwable {
            try {
                return m.invoke(target, a);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        }
    }

    /** The pid of the backend with APPNAME (the only one). */
    static int backendPid(String appName) throws SQLException {
        Object pid = adminQuery("SELECT pid FROM pg_stat_activity WHERE application_name = ?", appName);
        if (pid == null) throw new IllegalStateException("no backend " + appName);
        return ((Number) pid).intValue();
    }

    static void signal(String sig, int pid) throws Exception {
        int rc = new ProcessBuilder("kill", "-" + sig, Integer.toString(pid)).inheritIO().start().waitFor();
        if (rc != 0) throw new IllegalStateException("kill -" + sig + " " + pid + ": " + rc);
    }

    /**
     * SIGSTOP backend PID, and SIGCONT it and try again until it is caught
     * idle, waiting to read from its client (5 s, else an AssertionError).
     * Stopped inside a statement, a backend may hold a lightweight lock that
     * every other backend of the cluster needs, and stall them all. A
     * backend that is gone is not paused.
     */
    static void pauseIdle(int pid) throws Exception {
        ExecutorService reader = Executors.newSingleThreadExecutor();
        // Connected first: a new connection may need a lock the backend holds.
        try (Connection c = admin().getConnection(); PreparedStatement ps = c.prepareStatement(
                "SELECT coalesce(state = 'idle' AND wait_event = 'ClientRead', false)"
                + " FROM pg_stat_activity WHERE pid = ?")) {
            ps.setInt(1, pid);
            Callable<Boolean> idle = () -> {
                try (ResultSet rs = ps.executeQuery()) {
                    return rs.next() ? rs.getBoolean(1) : null; // null: gone
                }
            };
            for (long end = System.nanoTime() + 5_000_000_000L; System.nanoTime() < end; Thread.sleep(7)) {
                signal("STOP", pid);
                boolean stopped = false;
                try {
                    // Bounded here, not by a statement timeout: a reader
                    // retries while the backend is stopped updating its
                    // pg_stat_activity entry, and may wait on a lightweight
                    // lock it holds (no timeout ends that wait). SIGCONT
                    // ends both.
                    Future<Boolean> read = reader.submit(idle);
                    try {
                        stopped = Boolean.TRUE.equals(read.get(500, TimeUnit.MILLISECONDS));
                    } catch (TimeoutException e) {
                        stopped = false;
                    }
                    if (stopped) return;
                    resume(pid);
                    if (read.get(30, TimeUnit.SECONDS) == null) return; // gone: nothing to pause
                } finally {
                    if (!stopped) resume(pid); // never left stopped on an error
                }
            }
            throw new AssertionError("backend " + pid + " never stopped while idle (waiting for its client)");
        } finally {
            reader.shutdownNow();
        }
    }

    /** SIGCONT PID, if it is still there. */
    private static void resume(int pid) throws Exception {
        new ProcessBuilder("kill", "-CONT", Integer.toString(pid))
            .redirectError(ProcessBuilder.Redirect.DISCARD).start().waitFor();
    }

    /**
     * A loss listener that notes the wall clock (epoch ms) the moment it is
     * told, to compare with the server's expires_at afterwards (the server
     * runs on this machine, on loopback).  A listener that queries the
     * server itself answers late on a loaded machine: CI failed a loss told
     * in time that way (a new connection in the tenth of a lease left).
     */
    static final class LossClock implements LossListener {
        private final CompletableFuture<Long> at = new CompletableFuture<>();

        @Override
        public void lost(LockLostException why) {
            at.complete(System.currentTimeMillis());
        }

        /** When it was first told (epoch ms); fails after 30 s untold. */
        long told() throws Exception {
            return at.get(30, TimeUnit.SECONDS);
        }
    }

    /** The lease's end (epoch ms, rounded down) of holding FENCE on RESOURCE; 0 if its row is gone. */
    static long leaseEndMs(String resource, long fence) throws SQLException {
        return endMs(adminQuery("SELECT floor(extract(epoch FROM max(expires_at)) * 1000)::int8"
            + " FROM dlock.locks WHERE resource = ? AND fence = ?", resource, fence));
    }

    /** The ttl's end (epoch ms, rounded down) of session ID; 0 if its row is gone. */
    static long sessionEndMs(long id) throws SQLException {
        return endMs(adminQuery("SELECT floor(extract(epoch FROM max(expires_at)) * 1000)::int8"
            + " FROM dlock.sessions WHERE id = ?", id));
    }

    private static long endMs(Object v) {
        return v == null ? 0 : ((Number) v).longValue();
    }

    /**
     * Asserts CLOCK was told before END (epoch ms): the lease's end read once
     * no renewal could land any more.  NOW gives it again when told (0: the
     * row is gone): the later one counts, in case a renewal under way landed.
     */
    static void assertToldBefore(LossClock clock, long end, Callable<Long> now) throws Exception {
        long told = clock.told();
        long last = Math.max(end, now.call());
        if (told >= last) {
            throw new AssertionError("loss told at " + told + " (epoch ms), the lease on the server ended at " + last);
        }
    }

    /** Whether RESOURCE is held, unexpired, by the server's clock now (false: no row). */
    static boolean liveOnServer(String resource) throws SQLException {
        return Boolean.TRUE.equals(adminQuery(
            "SELECT bool_or(expires_at > clock_timestamp()) FROM dlock.locks WHERE resource = ?", resource));
    }

    /** Run CMD with sh; fail unless it exits 0. */
    static void sh(String cmd) throws Exception {
        int rc = run(cmd);
        if (rc != 0) throw new AssertionError(cmd + ": exit " + rc);
    }

    /** Run CMD in sh, its output dropped; its exit status. */
    static int run(String cmd) throws Exception {
        return new ProcessBuilder("sh", "-c", cmd + " >/dev/null 2>&1").start().waitFor();
    }

    /**
     * Stop the server (PGCTL: pg_ctl -D DATADIR -l LOG, fast) now, start it
     * again once the renewal due at DUEMS (epoch ms) has failed, then wait
     * until EXPIRYMS (the holding's expiry on the server, epoch ms) shows one
     * that landed after the stop, and the last one before it has run out.
     * The outage is measured, not slept: a slow stop or start under load
     * shortens the margin, never fakes a loss.
     */
    static void restartWithin(String pgCtl, long leaseMs, long dueMs, Callable<Long> expiryMs) throws Exception {
        // -t 300: a loaded machine once took longer than pg_ctl's 60 s.
        long stopped = System.currentTimeMillis();
        sh(pgCtl + " -w -t 300 -m fast stop");
        try {
            Thread.sleep(Math.max(0, dueMs + 1000 - System.currentTimeMillis()));
            sh(pgCtl + " -w -t 300 start");
        } finally {
            // Whatever failed, the server is up for the tests that follow
            // (pg_ctl status exits 3 when no server runs).
            if (run(pgCtl + " status") != 0) sh(pgCtl + " -w -t 300 start");
        }
        System.err.println("server down for " + (System.currentTimeMillis() - stopped) + " ms (the lease: " + leaseMs + " ms)");
        for (long end = System.currentTimeMillis() + leaseMs;; Thread.sleep(100)) {
            Long e = expiryMs.call();
            if (e != null && e > stopped + leaseMs) break;
            if (System.currentTimeMillis() > end) throw new AssertionError("no renewal landed on the server after the restart");
        }
        Thread.sleep(Math.max(0, stopped + leaseMs + 500 - System.currentTimeMillis()));
    }

    /** The expiry of RESOURCE's newest holding on the server (epoch ms), or null. */
    static Long leaseExpiryMs(String resource) throws SQLException {
        Object v = adminQuery("SELECT (extract(epoch FROM expires_at) * 1000)::int8 FROM dlock.locks"
            + " WHERE resource = ? ORDER BY fence DESC LIMIT 1", resource);
        return v == null ? null : ((Number) v).longValue();
    }

    /** The expiry of session ID on the server (epoch ms), or null. */
    static Long sessionExpiryMs(long id) throws SQLException {
        Object v = adminQuery("SELECT (extract(epoch FROM expires_at) * 1000)::int8 FROM dlock.sessions WHERE id = ?", id);
        return v == null ? null : ((Number) v).longValue();
    }
}
