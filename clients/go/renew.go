package dlock

// renew.go - the renewal goroutine of a Lock.
//
// Every third of the lease it sends dlock.renew on a connection of its
// own from the pool, each attempt on a goroutine of its own, bounded by
// the renewal deadline. A failed renewal is retried with back-off; the
// lock is lost (Done closed) when renew() says it is gone, or at the
// renewal deadline: the lease's end as this process measures it (from
// when the last acknowledged renewal was sent) less a margin. A renewal
// that hangs (its backend paused, the network black-holed) does not hold
// the deadline up, nor the next attempt: the loop waits on timers, not on
// the statement.

import (
	"context"
	"time"
)

// margin: how long before the lease's end a lock whose renewals fail is
// declared lost (a tenth of the lease, at most a second): room for the
// caller to stop, and for clock-rate differences with the server.
func margin(lease time.Duration) time.Duration { return minDur(lease/10, time.Second) }

type renewal struct {
	sent time.Time
	ok   bool
	err  error
}

// renewOnce: one renewal, bounded by CTX.
func (l *Lock) renewOnce(ctx context.Context) renewal {
	first, fence := l.target()
	var ok bool
	sent, err := queryRow(ctx, l.db, l.st.renew, []interface{}{first, l.holder, l.leaseArg, fence}, &ok)
	if err != nil {
		return renewal{err: err}
	}
	return renewal{sent: sent, ok: ok}
}

// run: the renewal loop, from an acquisition (or confirmation) sent at SENT.
func (l *Lock) run(sent time.Time) {
	deadline := sent.Add(l.lease - margin(l.lease))
	next := sent.Add(l.lease / 3)
	backoff := retryMin
	var lastErr error
	loss := time.NewTimer(time.Until(deadline))
	defer loss.Stop()
	stopRenew := l.stopRenew
	for {
		wake := time.NewTimer(time.Until(next))
		if stopRenew == nil {
			wake.Stop()
		}
		select {
		case <-l.finished:
			wake.Stop()
			return
		case <-stopRenew:
			// Release was called: no more renewals; lost at the deadline
			// unless the release gets through first.
			wake.Stop()
			stopRenew = nil
			continue
		case <-loss.C:
			wake.Stop()
			l.lose("renewals failed until just before the lease's end", lastErr)
			return
		case <-wake.C:
		}
		bound := minTime(deadline, time.Now().Add(l.lease/3))
		ctx, cancel := context.WithDeadline(context.Background(), bound)
		res := make(chan renewal, 1)
		go func() { res <- l.renewOnce(ctx) }()
		var r renewal
		select {
		case <-l.finished:
			cancel()
			return
		case <-loss.C:
			cancel()
			l.lose("renewals failed until just before the lease's end", lastErr)
			return
		case r = <-res:
			cancel()
		case <-ctx.Done():
			// A driver that does not give up at the deadline (lib/pq's
			// reads ignore it): the attempt failed; it ends on its own.
			r = renewal{err: ctx.Err()}
			cancel()
		}
		select {
		case <-l.stopRenew:
			// Released meanwhile: this answer may postdate the unlock.
			stopRenew = nil
			continue
		default:
		}
		switch {
		case r.err != nil:
			lastErr = r.err
			next = time.Now().Add(minDur(backoff, time.Until(deadline)))
			backoff = minDur(backoff*2, retryMax)
		case !r.ok:
			l.lose("renew() found it no longer held (broken, or expired and taken)", nil)
			return
		default:
			lastErr, backoff = nil, retryMin
			deadline = r.sent.Add(l.lease - margin(l.lease))
			next = r.sent.Add(l.lease / 3)
			if !loss.Stop() {
				<-loss.C
			}
			loss.Reset(time.Until(deadline))
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
