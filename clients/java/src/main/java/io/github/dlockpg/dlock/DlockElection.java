// DlockElection: leader election on dlock's campaign/proclaim/resign.  A
// leadership is a Holding on the election whose fence is the term: renewed
// and lost as a lock is; resigning releases it.  A campaign with a lease
// is confirmed by a renewal, which dates it: the leader campaigning again
// gets its term back with the old expiry.  Observers poll
// dlock.leader() (which works behind pgbouncer in transaction pooling,
// where LISTEN does not) and are told each change.
package io.github.dlockpg.dlock;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import javax.sql.DataSource;

/** An election: campaign to lead it, proclaim a value, resign, observe its leader. */
public final class DlockElection {
    private static final String CAMPAIGN = "SELECT dlock.campaign(election => ?, candidate => ?, value => ?,"
        + " lease => ?::interval, wait => ?::interval)";
    private static final String PROCLAIM =
        "SELECT dlock.proclaim(election => ?, candidate => ?, value => ?, term => ?)";
    private static final String LEADER = "SELECT candidate, value, term FROM dlock.leader(?)";

    private final DataSource ds;
    private final String name;
    private final String candidate;
    private final boolean generated;
    private final Duration lease;
    private final ScheduledExecutorService scheduler;
    private final DlockSession session;

    /** A candidate (unique to this object) in election NAME, with LEASE (null: the server's default). */
    public DlockElection(DataSource ds, String name, Duration lease) {
        this(ds, name, null, lease, null);
    }

    /** CANDIDATE: this candidate's holder text (null: unique to this object); SCHEDULER: for renewals. */
    public DlockElection(DataSource ds, String name, String candidate, Duration lease,
            ScheduledExecutorService scheduler) {
        this.ds = Objects.requireNonNull(ds, "dataSource");
        this.name = Db.text("election", name);
        this.generated = candidate == null;
        this.candidate = generated ? Db.uniqueHolder() : Db.text("candidate", candidate);
        Db.interval("lease", lease);
        this.lease = lease;
        this.scheduler = scheduler != null ? scheduler : Db.RENEWALS;
        this.session = null;
    }

    /** A candidate in election NAME whose leaderships are taken in SESSION (the candidate: its holder). */
    public DlockElection(DlockSession session, String name) {
        this.session = Objects.requireNonNull(session, "session");
        this.ds = session.ds;
        this.name = Db.text("election", name);
        this.generated = false;
        this.candidate = session.holder();
        this.lease = null;
        this.scheduler = Db.RENEWALS;
    }

    public String name() {
        return name;
    }

    public String candidate() {
        return candidate;
    }

    /** An observation of the leader: closing it stops it. */
    public interface Observation extends AutoCloseable {
        @Override
        void close();
    }

    /** The current leader of an election. */
    public record Leader(String candidate, String value, long term) {}

    /** This candidate's term as leader: renewed until it resigns or loses it. */
    public final class Leadership {
        private final Holding holding;

        private Leadership(Holding holding) {
            this.holding = holding;
        }

        /** The term: the holding's fence. */
        public long term() {
            return holding.fences[0];
        }

        public boolean isLost() {
            return holding.lostOrDue();
        }

        public void addLossListener(LossListener l) {
            holding.addListener(l);
        }

        /** The leader changes its value; false if it no longer leads. */
        public boolean proclaim(String value) throws SQLException {
            Boolean ok = Db.call(ds, PROCLAIM, (c, ps) -> {
                ps.setString(1, name);
                ps.setString(2, candidate);
                ps.setString(3, value);
                ps.setLong(4, term());
            }, rs -> rs.getBoolean(1), 0, null);
            return Boolean.TRUE.equals(ok);
        }

        /** Steps down (the next candidate is elected at once); false if it no longer led. */
        public boolean resign() throws SQLException {
            return holding.release();
        }

        /** dlock.assert_fence(election, term) on CONNECTION, in its transaction (55P03 if stale). */
        public void assertFence(Connection connection) throws SQLException {
            holding.assertFence(connection);
        }
    }

    /**
     * Campaigns with VALUE, waiting up to WAIT (null: no limit) behind
     * earlier candidates; the leadership once elected, empty if the wait
     * ended first.
     */
    public Optional<Leadership> campaign(String value, Duration wait) {
        try {
            Holding h = Acquisition.take(ds, CAMPAIGN, (c, ps, w) -> {
                ps.setString(1, name);
                ps.setString(2, candidate);
                ps.setString(3, value);
                Db.setInterval(ps, 4, Db.interval("lease", lease));
                Db.setInterval(ps, 5, w);
            }, false, List.of(name), candidate, generated, lease, Holding.RESIGN, Acquisition.GIVE_BACK_TERM, wait,
                false, false, scheduler, List.of(), session, true);
            return Optional.ofNullable(h).map(Leadership::new);
        } catch (InterruptedException e) {
            throw new IllegalStateException(e); // not thrown: not interruptible
        }
    }

    /** The current leader, if any. */
    public Optional<Leader> leader() throws SQLException {
        return leader(0);
    }

    /** The current leader; TIMEOUT_MS (0: none) bounds the statement. */
    private Optional<Leader> leader(long timeoutMs) throws SQLException {
        return Optional.ofNullable(Db.call(ds, LEADER, (c, ps) -> ps.setString(1, name),
            rs -> new Leader(rs.getString(1), rs.getString(2), rs.getLong(3)), timeoutMs, null));
    }

    /**
     * Tells LISTENER the leader now, then each change (another candidate,
     * term or value; empty: no leader), polling every POLL (timed by the
     * scheduler; with the client's own, each poll and the listener run on
     * a thread of their own, so a listener that campaigns holds up no
     * renewal), until the returned handle is closed. A failed poll (each
     * bounded by 5 s, or POLL if longer) is retried at the next one.
     */
    public Observation observe(Consumer<Optional<Leader>> listener, Duration poll) {
        Objects.requireNonNull(listener);
        long every = poll == null ? 200 : Math.max(1, poll.toMillis());
        long bound = Math.max(every, 5000);
        Object[] lastSeen = {null};
        boolean[] first = {true};
        Object mu = new Object();
        boolean[] closed = {false};
        ScheduledFuture<?>[] next = new ScheduledFuture<?>[1];
        Runnable[] once = new Runnable[1];
        once[0] = () -> {
            synchronized (mu) {
                if (closed[0]) return;
            }
            Optional<Leader> now = null;
            try {
                now = leader(bound);
            } catch (SQLException | RuntimeException e) {
                // retried at the next poll
            }
            if (now != null && (first[0] || !now.equals(lastSeen[0]))) {
                first[0] = false;
                lastSeen[0] = now;
                try {
                    listener.accept(now);
                } catch (RuntimeException e) {
                    // the listener's own failure: the observation goes on
                }
            }
            synchronized (mu) {
                if (closed[0]) return;
                try {
                    next[0] = scheduler.schedule(Db.onCall(scheduler, once[0]), every, TimeUnit.MILLISECONDS);
                } catch (java.util.concurrent.RejectedExecutionException e) {
                    closed[0] = true; // the caller's scheduler shut down: the observation ends
                }
            }
        };
        synchronized (mu) {
            next[0] = scheduler.schedule(Db.onCall(scheduler, once[0]), 0, TimeUnit.MILLISECONDS);
        }
        return () -> {
            synchronized (mu) {
                closed[0] = true;
                if (next[0] != null) next[0].cancel(false);
            }
        };
    }
}
