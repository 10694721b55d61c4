// Db: one statement on a connection of its own from the caller's
// DataSource, in autocommit, bounded by a network timeout; argument
// checks; the default holder; the client's shared threads.
package io.github.dlockpg.dlock;

import java.net.InetAddress;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.locks.LockSupport;
import javax.sql.DataSource;

final class Db {
    private Db() {}

    interface Binder {
        void bind(Connection c, PreparedStatement ps) throws SQLException;
    }

    interface Reader<T> {
        T read(ResultSet rs) throws SQLException;
    }

    private static final Executor DIRECT = Runnable::run;

    /**
     * The timing of renewals, keepalives and observations, unless the
     * caller gives its own scheduler: it never blocks, their statements run
     * on CALLS (onCall).
     */
    static final ScheduledExecutorService RENEWALS = pool("dlock-renewal", 1);
    /**
     * Their statements: a thread each while one runs, so that one that
     * hangs (a black-holed server, up to a third of its lease) holds up
     * no other lock's renewal.
     */
    static final ExecutorService CALLS = Executors.newCachedThreadPool(daemons("dlock-call"));
    /** Loss deadlines: never blocks on the network, so a hung renewal cannot delay a loss. */
    static final ScheduledExecutorService TIMER = pool("dlock-timer", 1);

    /** Loss listeners: a thread each while they run, so a slow one delays no other loss. */
    static final ExecutorService LISTENERS = Executors.newCachedThreadPool(daemons("dlock-loss"));

    /** TASK as scheduled on S: from the client's own scheduler, run on CALLS; on the caller's, there. */
    static Runnable onCall(ScheduledExecutorService s, Runnable task) {
        return s == RENEWALS ? () -> CALLS.execute(task) : task;
    }

    private static ThreadFactory daemons(String name) {
        AtomicInteger count = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + count.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    private static ScheduledExecutorService pool(String name, int n) {
        ScheduledThreadPoolExecutor p = new ScheduledThreadPoolExecutor(n, daemons(name));
        p.setRemoveOnCancelPolicy(true);
        return p;
    }

    /**
     * Runs SQL on a connection of its own (autocommit); the first row read
     * by READER (null when no row). TIMEOUT_MS (0: none) bounds the
     * statement; SENT[0] gets System.nanoTime() when it was sent. The
     * connection goes back as it came (autoCommit, network timeout).
     */
    static <T> T call(DataSource ds, String sql, Binder binder, Reader<T> reader, long timeoutMs, long[] sent)
            throws SQLException {
        try (Connection c = ds.getConnection()) {
            boolean auto = c.getAutoCommit();
            int before = c.getNetworkTimeout();
            try {
                if (!auto) c.setAutoCommit(true);
                if (timeoutMs > 0) c.setNetworkTimeout(DIRECT, (int) Math.min(Integer.MAX_VALUE, Math.max(1, timeoutMs)));
                try (PreparedStatement ps = prepare(c, sql)) {
                    binder.bind(c, ps);
                    if (sent != null) sent[0] = System.nanoTime();
                    try (ResultSet rs = ps.executeQuery()) {
                        return rs.next() ? reader.read(rs) : null;
                    }
                }
            } finally {
                restore(c, auto, before, timeoutMs > 0);
            }
        }
    }

    /** Gives a connection back as it came: AUTO (autoCommit), BEFORE (network timeout, if SET). */
    static void restore(Connection c, boolean auto, int before, boolean set) {
        try {
            if (c.isClosed()) return;
            if (set) c.setNetworkTimeout(DIRECT, before);
            if (c.getAutoCommit() != auto) c.setAutoCommit(auto);
        } catch (SQLException ignored) {
            // a broken connection: the pool finds out on its own
        }
    }

    static void setNetworkTimeout(Connection c, int ms) throws SQLException {
        c.setNetworkTimeout(DIRECT, ms);
    }

    /**
     * A statement never prepared on the server (pgjdbc's prepareThreshold
     * 0 on it, whatever the DataSource says): a named server-side
     * statement does not follow pgbouncer's transaction pooling.
     */
    static PreparedStatement prepare(Connection c, String sql) throws SQLException {
        PreparedStatement ps = c.prepareStatement(sql);
        try {
            Class<?> pg = Class.forName("org.postgresql.PGStatement", false, ps.getClass().getClassLoader());
            if (ps.isWrapperFor(pg)) pg.getMethod("setPrepareThreshold", int.class).invoke(ps.unwrap(pg), 0);
        } catch (ReflectiveOperationException | LinkageError | SQLException | RuntimeException ignored) {
            // another driver: its own settings
        }
        return ps;
    }

    /** A server error (the statement ran and was refused), not a lost connection. */
    static boolean serverError(SQLException e) {
        String s = e.getSQLState();
        return s != null && !s.startsWith("08") && !s.startsWith("57P");
    }

    /**
     * A transaction rollback the server asks to retry: a serialization
     * failure (40001, under REPEATABLE READ or SERIALIZABLE when a row
     * changed since the snapshot, as a renewal does) or a deadlock (40P01).
     */
    static boolean retryable(SQLException e) {
        String s = e.getSQLState();
        return "40001".equals(s) || "40P01".equals(s);
    }

    /**
     * How many times an acquiring statement is sent in all when the server
     * rolls it back and asks for a retry (retryable: nothing was granted).
     */
    static final int ACQUIRE_TRIES = 10;

    /**
     * Whether an acquiring statement that failed with E is sent again:
     * the server rolled it back and asks for a retry (40001: a
     * serializable caller's conflict with another; 40P01), so it granted
     * nothing; the call sent it fewer than ACQUIRE_TRIES times in all
     * (ROLLED_BACK: how many of its statements were rolled back before
     * this one); and the call was not interrupted (INTERRUPTED: an
     * interrupt seen and kept for the caller; or this thread's status):
     * an interrupted call stops there, with E.
     */
    static boolean sendAgain(SQLException e, int rolledBack, boolean interrupted) {
        return retryable(e) && rolledBack + 1 < ACQUIRE_TRIES && !interrupted
            && !Thread.currentThread().isInterrupted();
    }

    /**
     * Before an acquiring statement is sent again after its TRIES-th
     * rollback: a random pause of up to 2^TRIES ms (at most 32), so that
     * serializable callers that conflicted do not meet at once again (ten
     * immediate tries all failed under load).  An interrupt ends it early
     * and stays set (sendAgain then says no).
     */
    static void retryPause(int tries) {
        long maxMicros = 1000L * Math.min(32, 1L << Math.min(tries, 5));
        LockSupport.parkNanos(1000L * ThreadLocalRandom.current().nextLong(500, maxMicros + 1));
    }

    /** The holder text of one lock object: host, pid, a random UUID. */
    static String uniqueHolder() {
        String host;
        try {
            host = InetAddress.getLocalHost().getHostName();
        } catch (Exception e) {
            host = "localhost";
        }
        return host + ":" + ProcessHandle.current().pid() + ":" + UUID.randomUUID();
    }

    static String text(String name, String value) {
        if (value == null || value.isEmpty()) throw DlockException.invalid(name + " must be a non-empty string");
        return value;
    }

    /** A Duration as an interval parameter ("1500 milliseconds"); null stays null. */
    static String interval(String name, Duration d) {
        if (d == null) return null;
        if (d.isNegative()) throw DlockException.invalid(name + " must not be negative");
        try {
            return d.toMillis() + " milliseconds";
        } catch (ArithmeticException e) {
            throw DlockException.invalid(name + " is out of range: " + d);
        }
    }

    /** The longest span the client measures: deadlines from System.nanoTime() stay comparable (about 73 years). */
    static final long NANOS_MAX = 1L << 61;

    /**
     * D in nanoseconds as the server gets it (whole milliseconds: interval),
     * at most NANOS_MAX: a longer lease is renewed as if it were that long.
     */
    static long nanos(Duration d) {
        long ms;
        try {
            ms = d.toMillis();
        } catch (ArithmeticException e) {
            return NANOS_MAX;
        }
        return ms >= NANOS_MAX / 1_000_000 ? NANOS_MAX : ms * 1_000_000;
    }

    static void setInterval(PreparedStatement ps, int i, String v) throws SQLException {
        if (v == null) ps.setNull(i, java.sql.Types.VARCHAR);
        else ps.setString(i, v);
    }

}
