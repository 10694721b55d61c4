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
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.atomic.AtomicInteger;
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

    /** Renewals, unless the caller gives its own executor: daemon threads. */
    static final ScheduledExecutorService RENEWALS = pool("dlock-renewal", 4);
    /** Loss deadlines: never blocks on the network, so a hung renewal cannot delay a loss. */
    static final ScheduledExecutorService TIMER = pool("dlock-timer", 1);

    private static ScheduledExecutorService pool(String name, int n) {
        AtomicInteger count = new AtomicInteger();
        ScheduledThreadPoolExecutor p = new ScheduledThreadPoolExecutor(n, r -> {
            Thread t = new Thread(r, name + "-" + count.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        p.setRemoveOnCancelPolicy(true);
        return p;
    }

    /**
     * Runs SQL on a connection of its own (autocommit); the first row read
     * by READER (null when no row). TIMEOUT_MS (0: none) bounds the
     * statement; SENT[0] gets System.nanoTime() when it was sent.
     */
    static <T> T call(DataSource ds, String sql, Binder binder, Reader<T> reader, long timeoutMs, long[] sent)
            throws SQLException {
        try (Connection c = ds.getConnection()) {
            boolean auto = c.getAutoCommit();
            if (!auto) c.setAutoCommit(true);
            int before = c.getNetworkTimeout();
            if (timeoutMs > 0) c.setNetworkTimeout(DIRECT, (int) Math.min(Integer.MAX_VALUE, Math.max(1, timeoutMs)));
            T result;
            try (PreparedStatement ps = c.prepareStatement(sql)) {
                binder.bind(c, ps);
                if (sent != null) sent[0] = System.nanoTime();
                try (ResultSet rs = ps.executeQuery()) {
                    result = rs.next() ? reader.read(rs) : null;
                }
            }
            if (timeoutMs > 0) c.setNetworkTimeout(DIRECT, before);
            if (!auto) c.setAutoCommit(false);
            return result;
        }
    }

    /** A server error (the statement ran and was refused), not a lost connection. */
    static boolean serverError(SQLException e) {
        String s = e.getSQLState();
        return s != null && !s.startsWith("08") && !s.startsWith("57P");
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
        return d.toMillis() + " milliseconds";
    }

    static void setInterval(PreparedStatement ps, int i, String v) throws SQLException {
        if (v == null) ps.setNull(i, java.sql.Types.VARCHAR);
        else ps.setString(i, v);
    }

}
