package dlock

// session.go - OpenSession: one keepalive loop for many holdings
// (dlock.open_session, keepalive, close_session; dlock 1.1).
//
// A Session's locks have no lease and no renewal of their own. The
// session's goroutine sends dlock.keepalive every third of the ttl, on a
// connection taken from the pool for that statement (it works behind
// pgbouncer in transaction pooling). When keepalive returns NULL, or
// none is confirmed by the session's end less a margin, the session is
// lost: its Done and every one of its locks' Done are closed, before the
// ttl ends on the server. A keepalive also reads which holdings the
// server still has: a lock broken alone is lost alone.

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Session is a dlock session: its locks live as long as it does. Its
// methods are safe for concurrent use.
type Session struct {
	db     *sql.DB
	id     int64
	holder string
	ttl    time.Duration

	done      chan struct{} // closed when lost or closed
	stopAlive chan struct{} // closed at the first Close
	stopOnce  sync.Once
	due       deadline // the keepalive deadline

	mu      sync.Mutex
	state   int
	err     error
	locks   map[*Lock]struct{}
	closing chan struct{} // closed when the Close under way ends
}

// TTL is a session's ttl (default: the server's dlock.default_lease,
// 30 s). It is kept alive every third of it until Close.
func TTL(d time.Duration) Option {
	return func(o *options) { o.ttl, o.hasTTL = d, true }
}

// keepaliveQ keeps the session alive and says which of its holdings
// ($2 resources, $3 fences, as known when sent) it no longer has: their
// positions, from 1, comma-separated ("" for none).
const keepaliveQ = `SELECT dlock.keepalive(session => $1::pg_catalog.text::pg_catalog.int8) IS NOT NULL, ` +
	`coalesce((SELECT pg_catalog.string_agg(t.i::pg_catalog.text, ',') FROM ROWS FROM (pg_catalog.unnest($2::pg_catalog.text::pg_catalog.text[]), ` +
	`pg_catalog.unnest($3::pg_catalog.text::pg_catalog.int8[])) WITH ORDINALITY AS t(r, f, i) WHERE NOT EXISTS (SELECT FROM dlock.locks l ` +
	`WHERE l.resource OPERATOR(pg_catalog.=) t.r AND l.fence OPERATOR(pg_catalog.=) t.f ` +
	`AND l.session OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.int8)), '')`

// OpenSession opens a session (dlock.open_session) with TTL and Holder
// (default: unique to this session) and starts its keepalive loop. On a
// server whose dlock has no sessions (1.0) it returns an *Error with the
// server's SQLSTATE (42883) saying so.
func OpenSession(ctx context.Context, db *sql.DB, opts ...Option) (*Session, error) {
	if err := checkDB(db); err != nil {
		return nil, err
	}
	o := collect(opts)
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.hasLease || o.hasWait || o.fair || o.shared || o.maxPermits != 0 || o.hasDelay {
		return nil, invalid("OpenSession takes only TTL and Holder")
	}
	s := &Session{db: db, holder: o.holder, ttl: o.ttl.Truncate(time.Microsecond),
		done: make(chan struct{}), stopAlive: make(chan struct{}),
		locks: map[*Lock]struct{}{}}
	if !o.hasHolder {
		s.holder = uniqueHolder()
	}
	var id string
	sent, err := queryRow(ctx, db, probed, `SELECT dlock.open_session(ttl => $1::pg_catalog.text::pg_catalog.interval, holder => $2::pg_catalog.text)::pg_catalog.text`,
		[]interface{}{nullable(interval(o.ttl), o.hasTTL), s.holder}, &id)
	if err != nil {
		if c := sqlState(err); c == "42883" || c == "42P01" {
			return nil, &Error{Code: c, Err: err, Message: "dlock: this server's dlock has no sessions " +
				"(dlock.open_session(interval, text) is missing: dlock 1.1 or later is needed): " + err.Error()}
		}
		return nil, wrap(err, "opening a session")
	}
	if s.id, err = strconv.ParseInt(id, 10, 64); err != nil {
		return nil, &Error{Message: "dlock: unexpected session id " + strconv.Quote(id), Err: err}
	}
	if !o.hasTTL {
		var us sql.NullInt64
		_, err := queryRow(ctx, db, again, `SELECT (SELECT (extract(epoch FROM ttl) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8 `+
			`FROM dlock.sessions WHERE id OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.int8)`, []interface{}{id}, &us)
		if err == nil && !us.Valid {
			err = &Error{Err: ErrLost, Message: fmt.Sprintf("dlock: session %d gone right after it was opened", s.id)}
		}
		if err != nil {
			go s.abandon()
			return nil, wrap(err, "reading the session's ttl back")
		}
		s.ttl = time.Duration(us.Int64) * time.Microsecond
	}
	if time.Since(sent) >= s.ttl/3 {
		// A slow answer: a keepalive at once dates the session.
		c, cancel := context.WithTimeout(ctx, minDur(s.ttl/3, releaseTimeout))
		r := s.keepaliveOnce(c)
		cancel()
		if r.err != nil || !r.ok {
			go s.abandon()
			if r.err != nil {
				return nil, wrap(r.err, "confirming a session")
			}
			return nil, &Error{Err: ErrLost, Message: fmt.Sprintf("dlock: session %d ended before it was confirmed", s.id)}
		}
		sent = r.sent
	}
	s.due.set(dueAt(sent, s.ttl))
	go s.run(sent)
	return s, nil
}

// abandon: close a session the caller will not get.
func (s *Session) abandon() {
	c, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	var n sql.NullInt64
	_, _ = queryRow(c, s.db, probed, `SELECT dlock.close_session(session => $1::pg_catalog.text::pg_catalog.int8)`,
		[]interface{}{strconv.FormatInt(s.id, 10)}, &n)
}

// ID is the session's id (dlock.sessions.id).
func (s *Session) ID() int64 { return s.id }

// Holder is the holder of every lock in the session.
func (s *Session) Holder() string { return s.holder }

// TTL is the session's ttl (as given, or the server's default).
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session is lost or closed. Every lock of the
// session has its Done closed then too. Called past the keepalive
// deadline, it finds the session lost (as Lock.Done).
func (s *Session) Done() <-chan struct{} {
	s.judge()
	return s.done
}

// Err is nil while the session lives. After Done is closed: an *Error
// wrapping ErrLost, or ErrClosed after Close.
func (s *Session) Err() error {
	s.judge()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// judge: the session is lost once the clock is past its keepalive
// deadline.
func (s *Session) judge() {
	if s.due.passed() {
		s.lose(pausedPast, nil)
	}
}

// Acquire takes RESOURCE in the session, as dlock.Acquire does (Wait,
// Fair, Shared, LockDelay, Semaphore, Permits), with no lease of its own:
// the lock lives as long as the session. Releasing it leaves the session.
func (s *Session) Acquire(ctx context.Context, resource string, opts ...Option) (*Lock, error) {
	return s.acquire(ctx, []string{resource}, false, opts)
}

// TryAcquire is Acquire with Wait(0): one try.
func (s *Session) TryAcquire(ctx context.Context, resource string, opts ...Option) (*Lock, error) {
	return s.acquire(ctx, []string{resource}, false, append(opts, Wait(0)))
}

// AcquireAll takes every one of RESOURCES or none, in the session.
func (s *Session) AcquireAll(ctx context.Context, resources []string, opts ...Option) (*Lock, error) {
	return s.acquire(ctx, resources, true, opts)
}

// TryAcquireAll is AcquireAll with Wait(0).
func (s *Session) TryAcquireAll(ctx context.Context, resources []string, opts ...Option) (*Lock, error) {
	return s.acquire(ctx, resources, true, append(opts, Wait(0)))
}

// NewElection: a candidate in the election NAME whose leaderships are
// taken in the session (the candidate is the session's holder).
func (s *Session) NewElection(name string, opts ...Option) (*Election, error) {
	o := collect(opts)
	if err := s.inSession(o); err != nil {
		return nil, err
	}
	e, err := NewElection(s.db, name, append(opts, Holder(s.holder))...)
	if e != nil {
		e.sess, e.generated = s, false
	}
	return e, err
}

// inSession: O's options fit an acquisition in the session.
func (s *Session) inSession(o *options) error {
	if o.hasLease {
		return invalid("a lock in a session has no lease of its own (the session's TTL)")
	}
	if o.hasHolder && o.holder != s.holder {
		return invalid("a lock in a session has the session's holder, not %q", o.holder)
	}
	return nil
}

func (s *Session) acquire(ctx context.Context, resources []string, multi bool, opts []Option) (*Lock, error) {
	o := collect(opts)
	if err := s.inSession(o); err != nil {
		return nil, err
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	o.holder, o.hasHolder = s.holder, true
	return acquireIn(ctx, s.db, resources, multi, o, s)
}

// usable: nil while the session lives, else why not (55000, as the
// server says of an ended session).
func (s *Session) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == held {
		return nil
	}
	return &Error{Code: "55000", Err: s.err, Message: fmt.Sprintf("dlock: session %d has ended: %v", s.id, s.err)}
}

// sessionArg: the argument an acquisition adds for S (the session's id
// as parameter N), or "" without a session.
func (s *Session) arg(args *[]interface{}) string {
	if s == nil {
		return ""
	}
	*args = append(*args, strconv.FormatInt(s.id, 10))
	return `, session => $` + strconv.Itoa(len(*args)) + `::pg_catalog.text::pg_catalog.int8`
}

// adopt: L, just granted, joins the session; an error if the session
// ended meanwhile (L is then undone by the caller).
func (s *Session) adopt(l *Lock) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != held {
		return &Error{Code: "55000", Err: ErrLost, Message: fmt.Sprintf("dlock: %q was granted as session %d ended: %v", l.name(), s.id, s.err)}
	}
	s.locks[l] = struct{}{}
	return nil
}

// leave: L no longer belongs to the session (released).
func (s *Session) leave(l *Lock) {
	s.mu.Lock()
	delete(s.locks, l)
	s.mu.Unlock()
}

// lose: the session is lost, for REASON (CAUSE: the last keepalive
// error); every lock of it is lost with it.
func (s *Session) lose(reason string, cause error) {
	s.mu.Lock()
	if s.state != held {
		s.mu.Unlock()
		return
	}
	s.state = lost
	e := &Error{Code: sqlState(cause), Err: ErrLost, Message: fmt.Sprintf("dlock: session %d lost: %s", s.id, reason)}
	if cause != nil {
		e.Message += ": " + cause.Error()
	}
	s.err = e
	locks := s.locks
	s.locks = map[*Lock]struct{}{}
	s.mu.Unlock()
	for l := range locks {
		l.loseWith(&Error{Code: e.Code, Err: ErrLost, Message: fmt.Sprintf("dlock: %q lost with its session: %s", l.name(), e.Message)})
	}
	close(s.done)
}

// Close closes the session (dlock.close_session): every lock of it is
// released. It returns nil if the session lived until now; Err()
// (wrapping ErrLost) if it had been lost; a connection's or the server's
// error if the close did not get through: the session is then no longer
// kept alive and is lost at its deadline unless Close is called again
// first. Closing twice returns nil.
func (s *Session) Close(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.state == released {
			s.mu.Unlock()
			return nil
		}
		if busy := s.closing; busy != nil {
			s.mu.Unlock()
			select {
			case <-busy:
				continue
			case <-ctx.Done():
				return wrap(ctx.Err(), fmt.Sprintf("closing session %d", s.id))
			}
		}
		busy := make(chan struct{})
		s.closing = busy
		state, err := s.state, s.err
		s.mu.Unlock()
		err = s.close(ctx, state, err)
		s.mu.Lock()
		s.closing = nil
		s.mu.Unlock()
		close(busy)
		return err
	}
}

func (s *Session) close(ctx context.Context, state int, err error) error {
	s.stopOnce.Do(func() { close(s.stopAlive) })
	args := []interface{}{strconv.FormatInt(s.id, 10)}
	const q = `SELECT dlock.close_session(session => $1::pg_catalog.text::pg_catalog.int8)`
	var n sql.NullInt64
	if state == lost {
		c, cancel := context.WithTimeout(ctx, minDur(s.ttl/3, releaseTimeout))
		_, _ = queryRow(c, s.db, probed, q, args, &n)
		cancel()
		return err
	}
	_, qerr := queryRow(ctx, s.db, probed, q, args, &n)
	if qerr != nil && retryable(qerr) && ctx.Err() == nil {
		// Rolled back (a keepalive under way, SERIALIZABLE): once more. Not
		// after a failed connection: it may have closed the session, and
		// again it would say the session was lost.
		_, qerr = queryRow(ctx, s.db, probed, q, args, &n)
	}
	if qerr != nil {
		return wrap(qerr, fmt.Sprintf("closing session %d", s.id))
	}
	if !n.Valid {
		s.lose("it had ended at close (closed by another, or its ttl passed)", nil)
		return s.Err()
	}
	s.mu.Lock()
	if s.state == lost {
		defer s.mu.Unlock()
		return s.err
	}
	s.state = released
	s.err = ErrClosed
	locks := s.locks
	s.locks = map[*Lock]struct{}{}
	close(s.done)
	s.mu.Unlock()
	for l := range locks {
		l.closed()
	}
	return nil
}

// keepaliveOnce: one keepalive, bounded by CTX. A lock of the session
// whose holding the server no longer has (broken by an administrator) is
// lost, the session and its other locks living on.
func (s *Session) keepaliveOnce(ctx context.Context) renewal {
	var ok bool
	var gone string
	locks, resources, fences := s.holdings()
	sent, err := queryRow(ctx, s.db, again, keepaliveQ, []interface{}{strconv.FormatInt(s.id, 10), textArray(resources), intArray(fences)}, &ok, &gone)
	if err != nil {
		return renewal{err: err}
	}
	if ok && gone != "" {
		for _, i := range strings.Split(gone, ",") {
			n, err := strconv.Atoi(i)
			if err != nil || n < 1 || n > len(locks) {
				return renewal{err: &Error{Message: "dlock: unexpected keepalive answer " + strconv.Quote(gone)}}
			}
			l := locks[n-1]
			if l.loseHolding(fmt.Sprintf("dlock: %q no longer held in session %d (broken by an administrator?)", l.name(), s.id)) {
				s.leave(l)
			}
		}
	}
	return renewal{sent: sent, ok: ok}
}

// holdings: the session's locks, one entry per holding (a multi-lock has
// several), with their resources and fences.
func (s *Session) holdings() (locks []*Lock, resources []string, fences []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.locks {
		for i := range l.resources {
			locks = append(locks, l)
			resources = append(resources, l.resources[i])
			fences = append(fences, l.fences[i])
		}
	}
	return locks, resources, fences
}

// run: the keepalive loop, from an open (or keepalive) sent at SENT. The
// same loop as a lock's renewal (renew.go), on the session.
func (s *Session) run(sent time.Time) {
	loop{period: s.ttl, stop: s.stopAlive, finished: s.done, due: s.due.set,
		once: s.keepaliveOnce, lose: s.lose, what: "keepalives", gone: "keepalive() found the session ended (closed, or its ttl passed)",
	}.run(sent)
}
