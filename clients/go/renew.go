package dlock

// renew.go - the renewal loop of a Lock, and the keepalive loop of a
// Session (the same loop).
//
// Every third of the lease it sends one statement (dlock.renew, or
// dlock.keepalive) on a connection of its own from the pool, each attempt
// on a goroutine of its own, bounded (tryBound). A failed attempt is
// retried with back-off counted from its start (an attempt given up at
// its bound is followed at once: a stalled connection leaves time for
// another attempt); the holding is lost (Done closed)
// when the server says it is gone, or at the renewal deadline: the
// lease's end as this process measures it (from when the last
// acknowledged renewal was sent) less a margin. An attempt that hangs
// (its backend paused, the network black-holed) does not hold the
// deadline up, nor the next attempt: the loop waits on timers, not on
// the statement.

import (
	"context"
	"sync"
	"time"
)

// margin: how long before the lease's end a lock whose renewals fail is
// declared lost (a tenth of the lease, at most a second): room for the
// caller to stop, and for clock-rate differences with the server.
func margin(lease time.Duration) time.Duration { return minDur(lease/10, time.Second) }

// tryBound: when an attempt that began at NOW is given up (its context
// ends): a third of the lease later, never past DEADLINE. (Half the time
// left was tried: CI under load lost more leases with it.)
func tryBound(lease time.Duration, now, deadline time.Time) time.Time {
	return minTime(deadline, now.Add(lease/3))
}

// retryCap: the longest back-off between attempts: a tenth of the lease,
// at most retryMax.
func retryCap(lease time.Duration) time.Duration { return minDur(lease/10, retryMax) }

type renewal struct {
	sent time.Time
	ok   bool
	err  error
}

// renewOnce: one renewal, bounded by CTX.
func (l *Lock) renewOnce(ctx context.Context) renewal {
	first, fence := l.target()
	var ok bool
	sent, err := queryRow(ctx, l.db, again, l.st.renew, []interface{}{first, l.holder, l.leaseArg, fence}, &ok)
	if err != nil {
		return renewal{err: err}
	}
	return renewal{sent: sent, ok: ok}
}

// run: the renewal loop, from an acquisition (or confirmation) sent at SENT.
func (l *Lock) run(sent time.Time) {
	loop{period: l.lease, stop: l.stopRenew, finished: l.done, once: l.renewOnce, lose: l.lose,
		due: l.due.set, what: "renewals", gone: "renew() found it no longer held (broken, or expired and taken)"}.run(sent)
}

// loop: one renewal loop. stop is closed when the owner gives the holding
// up (no more renewals; lost at the deadline unless finished first);
// finished when it is lost or given up for good. due is told each
// renewal deadline.
type loop struct {
	period         time.Duration
	stop, finished chan struct{}
	once           func(context.Context) renewal
	lose           func(reason string, cause error)
	due            func(time.Time)
	what, gone     string
}

func (p loop) run(sent time.Time) {
	deadline := dueAt(sent, p.period) // told by the caller before it started the loop
	next := sent.Add(p.period / 3)
	backoff := minDur(retryMin, retryCap(p.period))
	var lastErr error
	late := p.what + " failed until just before the lease's end"
	loss := time.NewTimer(time.Until(deadline))
	defer loss.Stop()
	stop := p.stop
	for {
		wake := time.NewTimer(time.Until(next))
		if stop == nil {
			wake.Stop()
		}
		select {
		case <-p.finished:
			wake.Stop()
			return
		case <-stop:
			wake.Stop()
			stop = nil
			continue
		case <-loss.C:
			wake.Stop()
			p.lose(late, lastErr)
			return
		case <-wake.C:
		}
		if !time.Now().Before(deadline) {
			// Woken past the deadline (a paused process): not renewed.
			p.lose(late, lastErr)
			return
		}
		start := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), tryBound(p.period, start, deadline))
		res := make(chan renewal, 1)
		go func() { res <- p.once(ctx) }()
		var r renewal
		select {
		case <-p.finished:
			cancel()
			return
		case <-loss.C:
			cancel()
			p.lose(late, lastErr)
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
		case <-p.stop:
			// Given up meanwhile: this answer may postdate the release.
			stop = nil
			continue
		default:
		}
		switch {
		case r.err != nil:
			lastErr = r.err
			next = minTime(start.Add(backoff), deadline)
			backoff = minDur(backoff*2, retryCap(p.period))
		case !r.ok:
			p.lose(p.gone, nil)
			return
		default:
			lastErr, backoff = nil, minDur(retryMin, retryCap(p.period))
			deadline = r.sent.Add(p.period - margin(p.period))
			p.due(deadline)
			next = r.sent.Add(p.period / 3)
			if !loss.Stop() {
				<-loss.C
			}
			loss.Reset(time.Until(deadline))
		}
	}
}

// deadline: a holding's renewal deadline, read against the clock by Err
// and Done, so that a process paused past it learns of the loss at once
// (the loop's timer may fire late).
type deadline struct {
	mu sync.Mutex
	at time.Time
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	d.at = t
	d.mu.Unlock()
}

// passed: the deadline is known and the clock is past it.
func (d *deadline) passed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.at.IsZero() && time.Now().After(d.at)
}

// dueAt: the renewal deadline of a holding (or session) of PERIOD whose
// lease was dated from SENT, as the loop computes it. Set before the loop
// starts, so that a pause before it runs is judged too.
func dueAt(sent time.Time, period time.Duration) time.Time {
	return sent.Add(period - margin(period))
}

// pausedPast: the reason for a loss that the clock found.
const pausedPast = "its renewal deadline passed before a renewal got through (the process was paused, or renewals failed)"

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
