package dlock

// lock.go - Acquire, TryAcquire, AcquireAll: a *Lock whose lease is
// renewed on a goroutine of its own (renew.go) until Release.
//
// Every statement runs on a connection taken from the caller's *sql.DB
// for that one statement (holder-based: it works behind pgbouncer in
// transaction pooling, and never queues behind the caller's own work).
// Parameters go as text and are cast by the statement, so lib/pq and
// pgx's stdlib send the same; the SQL is dlock 1.0's, in named notation.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	retryMin       = 100 * time.Millisecond
	retryMax       = time.Second
	releaseTimeout = 10 * time.Second
)

// stmts: the statements on one holding ($1 resource, $2 holder, $3
// lease, $4 or $2 or $3 fence) or on a multi-lock's several (arrays).
type stmts struct{ renew, release, assert, check string }

var one = stmts{
	renew: `SELECT dlock.renew(resource => $1::pg_catalog.text, holder => $2::pg_catalog.text, ` +
		`lease => $3::pg_catalog.text::pg_catalog.interval, fence => $4::pg_catalog.text::pg_catalog.int8) IS NOT NULL`,
	release: `SELECT dlock.unlock(resource => $1::pg_catalog.text, holder => $2::pg_catalog.text, fence => $3::pg_catalog.text::pg_catalog.int8) IS NOT NULL`,
	assert:  `SELECT dlock.assert_fence(resource => $1::pg_catalog.text, fence => $2::pg_catalog.text::pg_catalog.int8)`,
	check:   `SELECT coalesce(dlock."check"(resource => $1::pg_catalog.text, fence => $2::pg_catalog.text::pg_catalog.int8), false)`,
}

const each = ` FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text::pg_catalog.text[]), pg_catalog.unnest(`

var many = stmts{
	renew: `SELECT coalesce(pg_catalog.bool_and(dlock.renew(resource => t.r, holder => $2::pg_catalog.text, ` +
		`lease => $3::pg_catalog.text::pg_catalog.interval, fence => t.f) IS NOT NULL), false)` + each + `$4::pg_catalog.text::pg_catalog.int8[])) AS t(r, f)`,
	release: `SELECT coalesce(pg_catalog.bool_and(dlock.unlock(resource => t.r, holder => $2::pg_catalog.text, fence => t.f) IS NOT NULL), false)` +
		each + `$3::pg_catalog.text::pg_catalog.int8[])) AS t(r, f)`,
	assert: `SELECT pg_catalog.count(dlock.assert_fence(resource => t.r, fence => t.f))` + each + `$2::pg_catalog.text::pg_catalog.int8[])) AS t(r, f)`,
	check:  `SELECT coalesce(pg_catalog.bool_and(dlock."check"(resource => t.r, fence => t.f)), false)` + each + `$2::pg_catalog.text::pg_catalog.int8[])) AS t(r, f)`,
}

const (
	held = iota
	released
	lost
)

// Lock is a leased holding (or several, from AcquireAll; or an
// election's leadership, from Campaign). Its methods are safe for
// concurrent use.
type Lock struct {
	db         *sql.DB
	resources  []string
	fences     []int64
	holder     string
	lease      time.Duration
	leaseArg   interface{}
	st         *stmts
	releaseQ   string
	permits    int
	maxPermits int
	sess       *Session // nil: a lease of its own

	done      chan struct{} // closed when lost or released
	stopRenew chan struct{} // closed at the first Release
	stopOnce  sync.Once
	due       deadline // the renewal deadline (a lease of its own)

	mu        sync.Mutex
	state     int
	err       error
	releasing chan struct{} // closed when the Release under way ends
	gaveUp    bool          // a Release of the lost lock returned its loss
}

// Resource is the resource (a multi-lock's first; an election's name).
func (l *Lock) Resource() string { return l.resources[0] }

// Resources are a multi-lock's resources, in the order given.
func (l *Lock) Resources() []string { return append([]string(nil), l.resources...) }

// Fence is the fencing token: strictly increasing for each new holder of
// the resource. A leadership's is its term.
func (l *Lock) Fence() int64 { return l.fences[0] }

// Fences are a multi-lock's fences, in the order of Resources.
func (l *Lock) Fences() []int64 { return append([]int64(nil), l.fences...) }

// Holder is the holder text.
func (l *Lock) Holder() string { return l.holder }

// Lease is the lease (as given, or the server's default read back); in
// a session, the session's ttl.
func (l *Lock) Lease() time.Duration { return l.lease }

// Session is the session the lock was taken in, or nil.
func (l *Lock) Session() *Session { return l.sess }

// Permits: the permits a semaphore's lock holds (0 for other locks).
func (l *Lock) Permits() int { return l.permits }

// Done is closed when the lease is lost (or the lock released). Stop the
// work it protects then: the loss is signalled before the lease ends.
// Called past the renewal deadline, it finds the lock lost (a process
// paused past it: the timer may not have fired yet).
func (l *Lock) Done() <-chan struct{} {
	l.judge()
	return l.done
}

// Err is nil while the lock is held. After Done is closed: an *Error
// wrapping ErrLost (Code: the SQLSTATE of the last failed renewal, if
// any), or ErrReleased after Release. Past the renewal deadline it is
// ErrLost, as Done says.
func (l *Lock) Err() error {
	l.judge()
	return l.errNow()
}

func (l *Lock) errNow() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// judge: the lock is lost once the clock is past its renewal deadline
// (its session's, in a session).
func (l *Lock) judge() {
	if l.sess != nil {
		l.sess.judge()
	} else if l.due.passed() {
		l.lose(pausedPast, nil)
	}
}

// target: what the statements take for the resource(s) and fence(s).
func (l *Lock) target() (interface{}, interface{}) {
	if l.st == &many {
		return textArray(l.resources), intArray(l.fences)
	}
	return l.resources[0], strconv.FormatInt(l.fences[0], 10)
}

func (l *Lock) name() string { return strings.Join(l.resources, ", ") }

// lose: the lease is lost, for REASON (CAUSE: the last renewal error).
func (l *Lock) lose(reason string, cause error) {
	e := &Error{Code: sqlState(cause), Err: ErrLost,
		Message: fmt.Sprintf("dlock: lease on %q lost: %s", l.name(), reason)}
	if cause != nil {
		e.Message += ": " + cause.Error()
	}
	l.loseWith(e)
}

// loseWith: the lock is lost, Err E.
func (l *Lock) loseWith(e error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held {
		return
	}
	l.state = lost
	l.err = e
	close(l.done)
}

// loseHolding: the session's keepalive found this lock's holding gone;
// lost unless a Release is under way (it may have ended it; a Release
// done is not held, a Release failed leaves it held: then it is lost).
// True if it was lost so.
func (l *Lock) loseHolding(reason string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held || l.releasing != nil {
		return false
	}
	l.state = lost
	l.err = &Error{Err: ErrLost, Message: reason}
	close(l.done)
	return true
}

// closed: the lock's session was closed, and the lock with it.
func (l *Lock) closed() {
	l.stopOnce.Do(func() { close(l.stopRenew) })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held {
		return
	}
	l.state = released
	l.err = ErrReleased
	close(l.done)
}

// Release gives the lock back. It returns nil if it was held until now;
// Err() (wrapping ErrLost) if the lease had been lost; a connection's or
// the server's error if the release did not get through, or its answer
// was lost (it may have released: it is not sent again): the lock is then
// no longer renewed and is lost at its renewal deadline unless Release is
// called again first (in a session: it stays held in the session until
// Release is called again, or the session ends; with a Holder shared by
// several locks, that Release may end another lock's count). Releasing twice returns
// nil. Releasing a lock of a session leaves the session and its other
// locks alone.
func (l *Lock) Release(ctx context.Context) error {
	for {
		l.mu.Lock()
		if l.state == released || l.gaveUp {
			l.mu.Unlock()
			return nil
		}
		if busy := l.releasing; busy != nil {
			// Another Release is under way: its outcome decides.
			l.mu.Unlock()
			select {
			case <-busy:
				continue
			case <-ctx.Done():
				return wrap(ctx.Err(), "releasing "+strconv.Quote(l.name()))
			}
		}
		busy := make(chan struct{})
		l.releasing = busy
		state, err := l.state, l.err
		l.mu.Unlock()
		err = l.release(ctx, state, err)
		l.mu.Lock()
		l.releasing = nil
		// Its loss told once: a Release again returns nil.
		l.gaveUp = errors.Is(err, ErrLost)
		l.mu.Unlock()
		close(busy)
		return err
	}
}

// release: Release's one attempt, from STATE (ERR: the loss, if lost).
func (l *Lock) release(ctx context.Context, state int, err error) error {
	l.stopOnce.Do(func() { close(l.stopRenew) })
	first, fence := l.target()
	var ok bool
	if l.sess != nil && state != released {
		defer func() {
			if l.Err() != nil {
				l.sess.leave(l)
			}
		}()
	}
	if state == lost {
		// A courtesy, in case the server still has it: bounded.
		c, cancel := context.WithTimeout(ctx, minDur(l.lease/3, releaseTimeout))
		_, _ = queryRow(c, l.db, probed, l.releaseQ, []interface{}{first, l.holder, fence}, &ok)
		cancel()
		return err
	}
	_, qerr := queryRow(ctx, l.db, probed, l.releaseQ, []interface{}{first, l.holder, fence}, &ok)
	if qerr != nil && retryable(qerr) && ctx.Err() == nil {
		// Rolled back (the caller's default isolation SERIALIZABLE met a
		// renewal under way): once more. Never after a failed connection:
		// it may have committed, and again it would take a second count of
		// a holding shared through one holder text.
		_, qerr = queryRow(ctx, l.db, probed, l.releaseQ, []interface{}{first, l.holder, fence}, &ok)
	}
	if qerr != nil {
		return wrap(qerr, "releasing "+strconv.Quote(l.name()))
	}
	if !ok {
		l.lose("it was no longer held at release (broken, or expired and taken)", nil)
		if err := l.Err(); err != ErrReleased {
			return err
		}
		return nil // its session was closed meanwhile
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == lost {
		return l.err
	}
	if l.state == released {
		return nil // its session was closed meanwhile
	}
	l.state = released
	l.err = ErrReleased
	close(l.done)
	return nil
}

// AssertFence runs dlock.assert_fence(resource, fence) on TX, in the
// caller's transaction: SQLSTATE 55P03 there unless this holding is still
// current; then the holding cannot be taken over until that transaction
// ends, so a write fenced in it is atomic with the check.
func (l *Lock) AssertFence(ctx context.Context, tx Execer) error {
	if tx == nil {
		return invalid("AssertFence needs the transaction of the write")
	}
	first, fence := l.target()
	_, err := tx.ExecContext(ctx, l.st.assert, first, fence)
	return wrap(err, "assert_fence on "+strconv.Quote(l.name()))
}

// Check asks the server whether this holding is current.
func (l *Lock) Check(ctx context.Context) (bool, error) {
	first, fence := l.target()
	var ok bool
	if _, err := queryRow(ctx, l.db, again, l.st.check, []interface{}{first, fence}, &ok); err != nil {
		return false, wrap(err, "check")
	}
	return ok, nil
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}
