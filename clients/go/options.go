package dlock

// options.go - the options of Acquire, TryAcquire, AcquireAll,
// NewElection and OpenSession.

import "time"

// Option sets one setting of an acquisition or an election.
type Option func(*options)

type options struct {
	lease, wait, lockDelay, poll, ttl   time.Duration
	hasLease, hasWait, hasDelay, hasTTL bool
	holder                              string
	hasHolder                           bool
	fair, shared, hasPermits            bool
	maxPermits, permits                 int
}

// Lease is the lease (default: the server's dlock.default_lease, 30 s).
// It is renewed every third of itself until Release.
func Lease(d time.Duration) Option {
	return func(o *options) { o.lease, o.hasLease = d, true }
}

// Wait bounds the wait for the lock (default: no limit but the context's
// deadline and statement_timeout). Wait(0) is one try.
func Wait(d time.Duration) Option {
	return func(o *options) { o.wait, o.hasWait = d, true }
}

// Holder sets the holder text (default: unique to each lock object, so
// two locks of one process exclude each other). For an election: the
// candidate.
func Holder(h string) Option {
	return func(o *options) { o.holder, o.hasHolder = h, true }
}

// Fair waits in the resource's fair (first come, first served) queue.
func Fair() Option { return func(o *options) { o.fair = true } }

// Shared takes a shared (read) holding: any number of shared holders at
// once, each with its own fence; none while a writer holds or waits.
func Shared() Option { return func(o *options) { o.shared = true } }

// LockDelay: after this holding ends without a release (lost, broken),
// nobody gets the resource for D (Chubby's lock-delay).
func LockDelay(d time.Duration) Option {
	return func(o *options) { o.lockDelay, o.hasDelay = d, true }
}

// Semaphore makes the resource a counting semaphore of MAX permits; the
// lock holds Permits(n) of them (default 1).
func Semaphore(max int) Option { return func(o *options) { o.maxPermits = max } }

// Permits: how many permits of a Semaphore to hold (default 1).
func Permits(n int) Option { return func(o *options) { o.permits, o.hasPermits = n, true } }

// PollInterval: how often Election.Observe reads the leader (default
// 250 ms).
func PollInterval(d time.Duration) Option { return func(o *options) { o.poll = d } }

func collect(opts []Option) *options {
	o := &options{}
	for _, f := range opts {
		if f != nil {
			f(o)
		}
	}
	return o
}

func (o *options) check() error {
	if o.hasLease && o.lease < time.Millisecond {
		return invalid("the lease must be at least a millisecond, not %v", o.lease)
	}
	if o.hasTTL && o.ttl < time.Millisecond {
		return invalid("the ttl must be at least a millisecond, not %v", o.ttl)
	}
	if o.hasWait && o.wait < 0 {
		return invalid("the wait must not be negative, not %v", o.wait)
	}
	if o.hasDelay && o.lockDelay < 0 {
		return invalid("the lock delay must not be negative, not %v", o.lockDelay)
	}
	if o.hasHolder && o.holder == "" {
		return invalid("the holder must not be empty")
	}
	if o.hasPermits && o.maxPermits == 0 {
		return invalid("Permits is for a Semaphore")
	}
	if o.maxPermits != 0 && (o.shared || o.hasDelay) {
		return invalid("a semaphore takes no Shared or LockDelay option")
	}
	return nil
}
