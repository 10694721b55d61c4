package dlock

// acquire.go - taking a holding: Acquire, TryAcquire, AcquireAll,
// TryAcquireAll (and Campaign, election.go, through take).
//
// The lease starts when the server grants it, somewhere in the
// statement's wait. After a short wait it is dated from when the
// statement was sent; after a wait of a third of the lease or more, from
// a renewal sent at once: never later than the server's expiry.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand"
	"strconv"
	"time"
)

// Acquire takes RESOURCE, waiting up to Wait (default: no limit but the
// context's deadline and statement_timeout). When the wait ends first it
// returns an *Error with Code 55P03 wrapping ErrNotAcquired. With
// Semaphore(max) it takes Permits(n) of the semaphore RESOURCE.
func Acquire(ctx context.Context, db *sql.DB, resource string, opts ...Option) (*Lock, error) {
	return acquire(ctx, db, []string{resource}, false, collect(opts))
}

// TryAcquire is Acquire with Wait(0): one try.
func TryAcquire(ctx context.Context, db *sql.DB, resource string, opts ...Option) (*Lock, error) {
	return acquire(ctx, db, []string{resource}, false, collect(append(opts, Wait(0))))
}

// AcquireAll takes every one of RESOURCES or none (dlock.lock_all): one
// Lock, renewed and released as a whole, lost when any of them is.
func AcquireAll(ctx context.Context, db *sql.DB, resources []string, opts ...Option) (*Lock, error) {
	return acquire(ctx, db, resources, true, collect(opts))
}

// TryAcquireAll is AcquireAll with Wait(0).
func TryAcquireAll(ctx context.Context, db *sql.DB, resources []string, opts ...Option) (*Lock, error) {
	return acquire(ctx, db, resources, true, collect(append(opts, Wait(0))))
}

// spec: one acquisition statement and what to make of its result.
type spec struct {
	query     string
	args      []interface{}
	resources []string
	holder    string
	generated bool
	o         *options
	wait      *options // whose Wait bounds the statement (a campaign's own; grantTries)
	st        *stmts
	releaseQ  string
	permits   string   // a semaphore's: the permits this call takes (undo)
	claim     *claim   // a campaign's (undo)
	keep      int64    // a term this candidate leads already: renewed by its own Lock
	confirm   bool     // date the lease from a renewal (campaign: see settle)
	sess      *Session // nil: a lease
}

func checkDB(db *sql.DB) error {
	if db == nil {
		return invalid("a *sql.DB is needed")
	}
	return nil
}

// waitArg: the wait as sent: Wait less SPENT (what earlier tries took:
// grantTries), bounded by CTX's deadline (so that the server ends the
// wait, not a cancelled statement); NULL for no limit.
func waitArg(ctx context.Context, o *options, spent time.Duration) interface{} {
	w, has := o.wait-spent, o.hasWait
	if w < 0 {
		w = 0
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl) - 50*time.Millisecond
		if left < 0 {
			left = 0
		}
		if !has || left < w {
			w, has = left, true
		}
	}
	return nullable(interval(w), has)
}

func acquire(ctx context.Context, db *sql.DB, resources []string, multi bool, o *options) (*Lock, error) {
	return acquireIn(ctx, db, resources, multi, o, nil)
}

// acquireIn: acquire, in the session SESS (nil: with a lease).
func acquireIn(ctx context.Context, db *sql.DB, resources []string, multi bool, o *options, sess *Session) (*Lock, error) {
	if err := checkDB(db); err != nil {
		return nil, err
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	if multi && (len(resources) == 0 || o.maxPermits != 0 || o.fair || o.hasDelay) {
		return nil, invalid("AcquireAll needs resources and takes no Semaphore, Fair or LockDelay option")
	}
	s := &spec{resources: resources, o: o, wait: o, st: &one, releaseQ: one.release, sess: sess}
	s.holder, s.generated = o.holder, !o.hasHolder
	if s.generated {
		s.holder = uniqueHolder()
	}
	lease := nullable(interval(o.lease), o.hasLease)
	s.args = []interface{}{resources[0], s.holder, lease, nil} // $4: the wait (grantTries)
	switch {
	case multi:
		s.st, s.releaseQ = &many, many.release
		s.args[0] = textArray(resources)
		s.args = append(s.args, strconv.FormatBool(o.shared))
		s.query = `SELECT pg_catalog.array_to_string(dlock.lock_all(resources => $1::pg_catalog.text::pg_catalog.text[], holder => $2::pg_catalog.text, ` +
			`lease => $3::pg_catalog.text::pg_catalog.interval, wait => $4::pg_catalog.text::pg_catalog.interval, shared => $5::pg_catalog.text::pg_catalog.bool` +
			sess.arg(&s.args) + `), ',')`
	case o.maxPermits != 0:
		permits := 1
		if o.hasPermits {
			permits = o.permits
		}
		s.args = append(s.args, strconv.Itoa(o.maxPermits), strconv.Itoa(permits), strconv.FormatBool(o.fair))
		s.permits = strconv.Itoa(permits)
		s.query = `SELECT dlock.acquire(semaphore => $1::pg_catalog.text, holder => $2::pg_catalog.text, max_permits => $5::pg_catalog.text::pg_catalog.int4, ` +
			`permits => $6::pg_catalog.text::pg_catalog.int4, lease => $3::pg_catalog.text::pg_catalog.interval, wait => $4::pg_catalog.text::pg_catalog.interval, ` +
			`fair => $7::pg_catalog.text::pg_catalog.bool` + sess.arg(&s.args) + `)::pg_catalog.text`
	default:
		s.args = append(s.args, strconv.FormatBool(o.fair), strconv.FormatBool(o.shared))
		s.query = `SELECT dlock.lock(resource => $1::pg_catalog.text, holder => $2::pg_catalog.text, lease => $3::pg_catalog.text::pg_catalog.interval, ` +
			`wait => $4::pg_catalog.text::pg_catalog.interval, fair => $5::pg_catalog.text::pg_catalog.bool, shared => $6::pg_catalog.text::pg_catalog.bool`
		if o.hasDelay {
			s.args = append(s.args, interval(o.lockDelay))
			s.query += `, lock_delay => $7::pg_catalog.text::pg_catalog.interval`
		}
		s.query += sess.arg(&s.args) + `)::pg_catalog.text`
	}
	l, err := take(ctx, db, s)
	if l != nil && o.maxPermits != 0 {
		l.maxPermits, l.permits = o.maxPermits, 1
		if o.hasPermits {
			l.permits = o.permits
		}
	}
	return l, err
}

// take runs S's statement; the Lock, renewing. It returns at CTX's end;
// a holding granted after all is then released (grant).
func take(ctx context.Context, db *sql.DB, s *spec) (*Lock, error) {
	name := s.resources[0]
	if len(s.resources) > 1 {
		name = fmt.Sprint(s.resources)
	}
	r, err := grantTries(ctx, db, s)
	sent := r.sent
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		// The context's deadline ended the wait before the server's answer
		// came (a loaded server): not acquired, as when the server ends it.
		return nil, &Error{Code: "55P03", Err: ErrNotAcquired, deadline: true,
			Message: fmt.Sprintf("dlock: %q not acquired before the context's deadline", name)}
	}
	if err != nil && sqlState(err) == "55P03" {
		// The server ended the wait (the caller's lock_timeout): not
		// acquired, as when the wait runs out.
		return nil, &Error{Code: "55P03", Err: ErrNotAcquired,
			Message: fmt.Sprintf("dlock: %q not acquired: %v", name, err)}
	}
	if err != nil {
		return nil, wrap(err, "acquiring "+strconv.Quote(name))
	}
	fences, err := parseFences(r.v)
	if err != nil {
		return nil, err
	}
	if fences == nil {
		return nil, &Error{Code: "55P03", Err: ErrNotAcquired,
			Message: fmt.Sprintf("dlock: %q not acquired within the wait", name)}
	}
	l := &Lock{db: db, resources: s.resources, fences: fences, holder: s.holder, st: s.st,
		releaseQ: s.releaseQ, leaseArg: s.args[2], lease: s.o.lease.Truncate(time.Microsecond),
		done: make(chan struct{}), stopRenew: make(chan struct{})}
	if s.sess != nil {
		// No lease, no renewal: the session's keepalives keep it.
		l.sess, l.lease, l.leaseArg = s.sess, s.sess.ttl, nil
		if err := s.sess.adopt(l); err != nil {
			go s.undo(db, fences, r.started, nil)
			return nil, err
		}
		return l, nil
	}
	// A term this candidate leads already is renewed by its own Lock.
	confirm := s.confirm && !(s.keep != 0 && fences[0] == s.keep)
	if err := l.settle(ctx, &sent, confirm); err != nil {
		go s.undo(db, fences, r.started, nil)
		return nil, err
	}
	l.due.set(dueAt(sent, l.lease))
	go l.run(sent)
	return l, nil
}

// grantTries runs S's statement (grant), again while the server rolls
// it back and asks for a retry (retryable: a serializable caller's
// conflict with another, a deadlock): nothing was granted. acquireTries
// tries in all, even for one try (Wait(0)); each sends as its wait ($4)
// only what is left of Wait since the first, so that the retries never
// wait longer than asked. The last try's error is returned.
func grantTries(ctx context.Context, db *sql.DB, s *spec) (call, error) {
	start := time.Now()
	for try := 1; ; try++ {
		var spent time.Duration // the first sends Wait itself
		if try > 1 {
			spent = time.Since(start)
		}
		s.args[3] = waitArg(ctx, s.wait, spent)
		r, err := grant(ctx, db, s)
		if err == nil || try == acquireTries || !retryable(err) || ctx.Err() != nil {
			return r, err
		}
		// A random pause of up to 2^try ms (at most 32): serializable
		// callers that conflicted do not meet at once again (ten
		// immediate tries all failed under load).
		shift := try
		if shift > 5 {
			shift = 5
		}
		timer := time.NewTimer(time.Duration(mrand.Int63n(int64(time.Millisecond)<<shift)) + 500*time.Microsecond)
		select {
		case <-ctx.Done():
			timer.Stop()
			return r, err
		case <-timer.C:
		}
	}
}

// grant runs S's statement; its answer. At CTX's end it returns CTX's
// error at once; the statement goes on by itself and its answer decides
// (outcome). A holding it granted after all is given back by its fence,
// the holder's or not (the caller was told it failed: undo); if the
// outcome stays unknown, a holder made up here is released whole if
// nothing else uses it (madeUp).
func grant(ctx context.Context, db *sql.DB, s *spec) (call, error) {
	// While it runs the statement's application_name ends with a tag
	// (set_config local to its transaction): a cancel finds its backend.
	tag := callTag()
	args := append(append([]interface{}(nil), s.args...), tag)
	n := strconv.Itoa(len(args))
	query := s.query + `, ` + startedCol + ` FROM (SELECT pg_catalog.set_config('application_name', pg_catalog.left(pg_catalog.current_setting('application_name'), ` +
		`62 OPERATOR(pg_catalog.-) pg_catalog.length($` + n + `::pg_catalog.text)) OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) $` + n + `::pg_catalog.text, true)) AS call`
	sctx, stop := context.WithCancel(context.Background())
	ch := make(chan call, 1)
	go func() {
		var r call
		r.err = onConn(ctx, db, probed, func(conn *sql.Conn) error {
			r.sent = time.Now()
			return conn.QueryRowContext(sctx, query, args...).Scan(&r.v, &r.started)
		})
		ch <- r
	}()
	select {
	case r := <-ch:
		stop()
		return r, r.err
	case <-ctx.Done():
	}
	cancelled := !errors.Is(ctx.Err(), context.DeadlineExceeded)
	go func() {
		defer stop()
		r := outcome(ch, db, tag, cancelled, s.madeUp(), stop)
		if r.err != nil {
			// 57014: cancelled by the server (ours, or statement_timeout):
			// rolled back, nothing granted.
			if !r.sent.IsZero() && !serverError(r.err) && sqlState(r.err) != "57014" {
				s.undo(db, nil, "", r.err)
			}
			return
		}
		if fences, err := parseFences(r.v); err == nil && fences != nil {
			s.undo(db, fences, r.started, nil)
		}
	}()
	return call{}, ctx.Err()
}

// call: an acquisition statement's answer: its result, and when the
// statement started on the server (startedCol).
type call struct {
	sent    time.Time
	v       sql.NullString
	started string
	err     error
}

// startedCol: a column every acquisition and campaign statement adds
// (grant): when it started, in microseconds since the epoch, as text. A
// campaign's give back (giveBackTerm) resigns only a term elected since
// then.
const startedCol = `(extract(epoch FROM pg_catalog.statement_timestamp()) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8::pg_catalog.text`

// giveBackPermits and giveBackTerm give back a semaphore's grant and a
// campaign's ($1 resource, $2 holder, $3 fence): unlock gives back every
// permit of the holder and resign ends the term, so both act only on
// what the call got. A semaphore's ($4 the call's permits) ends the
// holding only if it has just the permits the call took: if the holder
// held some before (another Lock with its holder, the same session) or
// another call of it added some meanwhile, they all stay with that
// holding until it is released. A campaign's ($4 its startedCol) resigns
// only a term elected since its statement began (a term the candidate
// led before stays: the server keeps its elected_at when its leader
// campaigns again), and runs only when no other campaign or leadership
// of this process claims the election and candidate (undo).
var (
	giveBackPermits = `SELECT dlock.unlock(resource => $1::pg_catalog.text, holder => $2::pg_catalog.text, fence => $3::pg_catalog.text::pg_catalog.int8) IS NOT NULL ` +
		`FROM dlock.locks WHERE resource OPERATOR(pg_catalog.=) $1::pg_catalog.text AND holder OPERATOR(pg_catalog.=) $2::pg_catalog.text ` +
		`AND fence OPERATOR(pg_catalog.=) $3::pg_catalog.text::pg_catalog.int8 AND permits OPERATOR(pg_catalog.=) $4::pg_catalog.text::pg_catalog.int4`
	giveBackTerm = `SELECT coalesce(dlock.resign(election => $1::pg_catalog.text, candidate => $2::pg_catalog.text, term => $3::pg_catalog.text::pg_catalog.int8), false) ` +
		`FROM dlock.leader(election => $1::pg_catalog.text) l WHERE l.term OPERATOR(pg_catalog.=) $3::pg_catalog.text::pg_catalog.int8 ` +
		`AND l.elected_at OPERATOR(pg_catalog.>=) ('epoch'::pg_catalog.timestamptz OPERATOR(pg_catalog.+) ` +
		`($4::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.*) '1 microsecond'::pg_catalog.interval))`
)

// outcome: the answer of a statement whose caller has gone (CH). At a
// deadline the server ends the wait first (waitArg). After a cancel
// (CANCELLED) the server is asked to cancel the backend that runs the
// statement (found by its TAG), every 200 ms until it answers: a
// server's error then means nothing was granted, an answer says what
// was. A driver's cancel (STOP) would drop a grant's answer: it comes
// after releaseTimeout; at once when the server's cancel cannot be sent
// (no other connection in the pool, a role that may not signal) if the
// holder was made up here (ANYHOW: released whole if unknown). The
// answer is waited for another releaseTimeout; then the outcome is
// unknown (a context error).
func outcome(ch chan call, db *sql.DB, tag string, cancelled, anyhow bool, stop func()) call {
	t := time.NewTimer(releaseTimeout)
	defer t.Stop()
	var tick <-chan time.Time
	if cancelled {
		k := time.NewTicker(200 * time.Millisecond)
		defer k.Stop()
		tick = k.C
		if !cancelCall(db, tag) && anyhow {
			tick = nil
			stop()
		}
	}
	for {
		select {
		case r := <-ch:
			return r
		case <-tick:
			if !cancelCall(db, tag) && anyhow {
				tick = nil
				stop()
			}
			continue
		case <-t.C:
		}
		break
	}
	stop()
	t.Reset(releaseTimeout)
	select {
	case r := <-ch:
		return r
	case <-t.C:
		return call{sent: time.Now(), err: context.DeadlineExceeded}
	}
}

// callTag: "dlock:" and 16 random hex digits.
func callTag() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return fmt.Sprintf("dlock:%016x", time.Now().UnixNano())
	}
	return "dlock:" + hex.EncodeToString(b)
}

// cancelCall: ask the server to cancel the statement tagged TAG (a no-op
// if none runs: not arrived yet, or answered). False if it cannot be
// asked: no other connection in the pool, or the server refused (a role
// that may not signal that backend). A slow answer is not a refusal.
func cancelCall(db *sql.DB, tag string) bool {
	if st := db.Stats(); st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections {
		return false
	}
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var n sql.NullInt64
	_, err := queryRow(c, db, probed, `SELECT pg_catalog.count(pg_catalog.pg_cancel_backend(pid)) FROM pg_catalog.pg_stat_activity `+
		`WHERE pg_catalog.right(application_name, pg_catalog.length($1::pg_catalog.text)) OPERATOR(pg_catalog.=) $1::pg_catalog.text `+
		`AND usesysid OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) pg_catalog.session_user()) `+
		`AND pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()`,
		[]interface{}{tag}, &n)
	return !serverError(err)
}

// undo gives back a holding S granted that the caller will not get: by
// its FENCES, a semaphore's with giveBackPermits, a campaign's with
// giveBackTerm (STARTED: its statement's startedCol) if no other claim
// shares its own, else with its release (a plain or multi-lock's
// re-entry: one count off); with no FENCES (CAUSE: the outcome unknown),
// a made-up holder's every holding (madeUp).
func (s *spec) undo(db *sql.DB, fences []int64, started string, cause error) {
	c, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if fences == nil {
		if s.madeUp() && cause != nil {
			var n sql.NullInt64
			_, _ = queryRow(c, db, probed, `SELECT dlock.unlock_all(holder => $1::pg_catalog.text)`, []interface{}{s.holder}, &n)
		}
		return
	}
	l := &Lock{resources: s.resources, fences: fences, st: s.st}
	first, fence := l.target()
	q, args := s.releaseQ, []interface{}{first, s.holder, fence}
	switch {
	case s.permits != "":
		q, args = giveBackPermits, append(args, s.permits)
	case s.claim != nil:
		if !s.claim.alone() {
			return
		}
		q, args = giveBackTerm, append(args, started)
	}
	var ok bool
	_, _ = queryRow(c, db, probed, q, args, &ok)
}

// madeUp: S's holder was made up here and nothing else of this process
// uses it (a campaign of an Election without Holder: no other claim), so
// that all its holdings may be released.
func (s *spec) madeUp() bool {
	return s.generated && (s.claim == nil || s.claim.alone())
}

// settle: the lease of a holding just taken (the server's default read
// back when none was given), and a renewal at once after a long wait, or
// always with CONFIRM, which then dates the lease (SENT). A campaign
// needs CONFIRM: a leader campaigning again gets its term back with the
// expiry it had, not a new lease.
func (l *Lock) settle(ctx context.Context, sent *time.Time, confirm bool) error {
	if l.leaseArg == nil {
		// In microseconds, as an integer: float8's text depends on
		// extra_float_digits ("2e+03" at -15).
		var us sql.NullInt64
		_, err := queryRow(ctx, l.db, again, `SELECT (SELECT (extract(epoch FROM lease) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8 FROM dlock.locks `+
			`WHERE resource OPERATOR(pg_catalog.=) $1::pg_catalog.text AND holder OPERATOR(pg_catalog.=) $2::pg_catalog.text `+
			`AND fence OPERATOR(pg_catalog.=) $3::pg_catalog.text::pg_catalog.int8)`,
			[]interface{}{l.resources[0], l.holder, strconv.FormatInt(l.fences[0], 10)}, &us)
		if err != nil {
			return wrap(err, "reading the lease back")
		}
		if !us.Valid {
			return &Error{Err: ErrLost, Message: fmt.Sprintf("dlock: %q gone right after it was acquired", l.name())}
		}
		l.lease = time.Duration(us.Int64) * time.Microsecond
	}
	if !confirm && time.Since(*sent) < l.lease/3 {
		return nil
	}
	c, cancel := context.WithTimeout(ctx, minDur(l.lease/3, releaseTimeout))
	defer cancel()
	r := l.renewOnce(c)
	if r.err != nil {
		return wrap(r.err, "confirming "+strconv.Quote(l.name()))
	}
	if !r.ok {
		return &Error{Err: ErrLost, Message: fmt.Sprintf("dlock: the lease of %q ended before its acquisition was answered", l.name())}
	}
	*sent = r.sent
	return nil
}
