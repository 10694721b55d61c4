// RetryBudgetTest: the renewal's retry budget (Holding.tryTimeoutMs,
// retryWaitNanos, nextBackoffMs), no server: a try that stalls is given
// up at its bound and leaves the next try, on a new connection, at least
// a sixth of the lease before the deadline; a fast failure backs off at
// most a tenth of the lease. A third of the lease per try left 0.2 s of
// a 3 s lease after the back-off: on a loaded machine it came too late.
// Promises: P16
package io.github.dlockpg.dlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class RetryBudgetTest {
    @Test
    @DisplayName("a stalled try leaves a sixth of the lease for the next; a fast failure backs off")
    void budget() {
        for (long leaseMs : new long[] {300, 1500, 3000, 30000, 3600000}) {
            long lease = TimeUnit.MILLISECONDS.toNanos(leaseMs);
            long left = lease - Holding.margin(lease) - lease / 3;     // the renewal is due
            long bound = Holding.tryTimeoutMs(lease, left);
            assertTrue(bound >= leaseMs / 6 && TimeUnit.MILLISECONDS.toNanos(bound) <= left, "lease " + leaseMs + ": bound " + bound);
            long now = System.nanoTime();
            long deadline = now + left - TimeUnit.MILLISECONDS.toNanos(bound);
            // Stalled to its bound: the next try at once, with a sixth or more.
            assertEquals(0, Holding.retryWaitNanos(lease, 100, now - TimeUnit.MILLISECONDS.toNanos(bound), deadline));
            long next = Holding.tryTimeoutMs(lease, deadline - now);
            assertTrue(next >= leaseMs / 6, "lease " + leaseMs + ": next " + next);
            // Refused at once: the back-off, doubled, at most a tenth of the lease.
            long backoff = Holding.nextBackoffMs(lease, 800);
            assertTrue(backoff <= Math.min(1000, leaseMs / 10) && backoff > 0, "lease " + leaseMs + ": back-off " + backoff);
            long b = TimeUnit.MILLISECONDS.toNanos(backoff);
            long wait = Holding.retryWaitNanos(lease, backoff, System.nanoTime(), deadline);
            assertTrue(wait <= b, "lease " + leaseMs + ": wait " + wait);
            // Counted from the try's start (here a second ahead, so that a
            // pause of this thread cannot make the wait look right).
            long ahead = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
            long w = Holding.retryWaitNanos(lease, backoff, ahead, ahead + TimeUnit.HOURS.toNanos(1));
            assertTrue(w <= TimeUnit.SECONDS.toNanos(1) + b && w > TimeUnit.MILLISECONDS.toNanos(500) + b,
                "lease " + leaseMs + ": wait from a start ahead " + w);
        }
    }
}
