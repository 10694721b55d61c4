package dlock

// election.go - leader election on dlock's campaign, proclaim, resign and
// leader, and a channel of leader changes.
//
// A leadership is a *Lock on the election whose fence is the term: it is
// renewed the same way, Done is closed when it is lost, and Release
// resigns. Observe polls dlock.leader (database/sql has no LISTEN; polling
// works behind pgbouncer in transaction pooling too).

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"time"
)

// Election is one candidate in the election NAME.
type Election struct {
	db        *sql.DB
	name      string
	candidate string
	generated bool
	o         *options
	sess      *Session // nil: leaderships with a lease

	mu   sync.Mutex
	lead *Lock
}

// Leader is the current leader of an election. Value is "" when the
// leader proclaimed none.
type Leader struct {
	Candidate string
	Value     string
	Term      int64
	ElectedAt time.Time
	ExpiresAt time.Time
}

// NewElection: a candidate (Holder: its text, default unique to this
// object) with a leadership lease (Lease, default the server's) in the
// election NAME. PollInterval sets how often Observe reads the leader.
func NewElection(db *sql.DB, name string, opts ...Option) (*Election, error) {
	if err := checkDB(db); err != nil {
		return nil, err
	}
	o := collect(opts)
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.poll <= 0 {
		o.poll = 250 * time.Millisecond
	}
	e := &Election{db: db, name: name, candidate: o.holder, generated: !o.hasHolder, o: o}
	if e.generated {
		e.candidate = uniqueHolder()
	}
	return e, nil
}

// Candidate is this candidate's text.
func (e *Election) Candidate() string { return e.candidate }

// Campaign waits (up to Wait, or the context's deadline) behind earlier
// candidates and returns the leadership once elected; Code 55P03
// wrapping ErrNotAcquired when the wait ends first. A leader campaigning
// again gets its current leadership back.
func (e *Election) Campaign(ctx context.Context, value string, opts ...Option) (*Lock, error) {
	o := collect(opts)
	if err := o.check(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	cur := e.lead
	e.mu.Unlock()
	var keep int64
	if cur != nil && cur.Err() == nil {
		keep = cur.Fence()
	}
	s := &spec{resources: []string{e.name}, holder: e.candidate, generated: e.generated, o: e.o, wait: o,
		st: &one, keep: keep, confirm: e.sess == nil,
		releaseQ: `SELECT coalesce(dlock.resign(election => $1::pg_catalog.text, candidate => $2::pg_catalog.text, term => $3::pg_catalog.text::pg_catalog.int8), false)`,
		query: `SELECT dlock.campaign(election => $1::pg_catalog.text, candidate => $2::pg_catalog.text, lease => $3::pg_catalog.text::pg_catalog.interval, ` +
			`wait => $4::pg_catalog.text::pg_catalog.interval, value => $5::pg_catalog.text`,
		args: []interface{}{e.name, e.candidate, nullable(interval(e.o.lease), e.o.hasLease), nil, value}, sess: e.sess} // $4: the wait (grantTries)
	if e.sess != nil {
		if err := e.sess.inSession(o); err != nil {
			return nil, err
		}
		if err := e.sess.usable(); err != nil {
			return nil, err
		}
	}
	s.query += e.sess.arg(&s.args) + `)::pg_catalog.text`
	s.claim = newClaim(e.name, e.candidate)
	l, err := take(ctx, e.db, s)
	if err != nil {
		s.claim.end() // (a give back under way asks for the others: alone)
		return nil, err
	}
	if keep != 0 && l.Fence() == keep {
		// Campaigning again while leading: one leadership, renewed once.
		s.claim.end()
		l.stopRenewing()
		return cur, nil
	}
	// The leadership claims its election until it is released or lost
	// (its session closed or lost too).
	go func() {
		<-l.done
		s.claim.end()
	}()
	e.mu.Lock()
	e.lead = l
	e.mu.Unlock()
	return l, nil
}

// claims: how many claims of this process each election and candidate
// has: its campaigns under way, and the leaderships they got until these
// end. Two Election objects of one candidate, two campaigns of one
// Election or of one session, are two claims.
var claims = struct {
	sync.Mutex
	n map[[2]string]int
}{n: map[[2]string]int{}}

// claim: a campaign's claim, then its leadership's.
type claim struct {
	key   [2]string
	ended bool
}

func newClaim(election, candidate string) *claim {
	claims.Lock()
	defer claims.Unlock()
	k := [2]string{election, candidate}
	claims.n[k]++
	return &claim{key: k}
}

// end: C no longer claims (ending it again does nothing).
func (c *claim) end() {
	claims.Lock()
	defer claims.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	if claims.n[c.key]--; claims.n[c.key] == 0 {
		delete(claims.n, c.key)
	}
}

// alone: no other claim has C's election and candidate (C may have
// ended: a campaign's give back runs after Campaign returned). A give
// back of C's grant (undo) may then end the term, or the made-up
// candidate's holdings.
func (c *claim) alone() bool {
	claims.Lock()
	defer claims.Unlock()
	n := claims.n[c.key]
	if !c.ended {
		n--
	}
	return n == 0
}

// stopRenewing: a duplicate Lock of a holding another Lock renews.
func (l *Lock) stopRenewing() {
	if l.sess != nil {
		l.sess.leave(l)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == released {
		return // its session closed meanwhile
	}
	if l.state == held {
		close(l.done) // (lost meanwhile: closed already)
	}
	l.state = released
	l.err = ErrReleased
}

func (e *Election) current() (*Lock, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lead == nil {
		return nil, &Error{Code: "55000", Message: "dlock: not campaigned yet"}
	}
	return e.lead, nil
}

// Proclaim changes the leader's value; false if this candidate no longer
// leads.
func (e *Election) Proclaim(ctx context.Context, value string) (bool, error) {
	l, err := e.current()
	if err != nil {
		return false, err
	}
	var ok sql.NullBool
	_, err = queryRow(ctx, e.db, probed, `SELECT dlock.proclaim(election => $1::pg_catalog.text, candidate => $2::pg_catalog.text, `+
		`value => $3::pg_catalog.text, term => $4::pg_catalog.text::pg_catalog.int8)`,
		[]interface{}{e.name, e.candidate, value, strconv.FormatInt(l.Fence(), 10)}, &ok)
	if err != nil {
		return false, wrap(err, "proclaim")
	}
	return ok.Valid && ok.Bool, nil
}

// Resign steps down (the next candidate is elected at once): Release of
// the leadership.
func (e *Election) Resign(ctx context.Context) error {
	l, err := e.current()
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

// Leader reads the current leader; nil when there is none.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	// Numbers as text, not timestamps: their text depends on DateStyle,
	// and lib/pq and pgx's simple protocol read only ISO.
	var ld Leader
	var value sql.NullString
	var term, elected, expires string
	_, err := queryRow(ctx, e.db, again, `SELECT candidate, value, term::pg_catalog.text, `+
		`(extract(epoch FROM elected_at) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8::pg_catalog.text, `+
		`(extract(epoch FROM expires_at) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8::pg_catalog.text `+
		`FROM dlock.leader(election => $1::pg_catalog.text)`, []interface{}{e.name},
		&ld.Candidate, &value, &term, &elected, &expires)
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err, "leader")
	}
	ld.Value = value.String
	var us [2]int64
	for i, v := range []string{elected, expires} {
		if us[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, wrap(err, "leader")
		}
	}
	ld.ElectedAt, ld.ExpiresAt = time.UnixMicro(us[0]), time.UnixMicro(us[1])
	if ld.Term, err = strconv.ParseInt(term, 10, 64); err != nil {
		return nil, wrap(err, "leader")
	}
	return &ld, nil
}

// Observer delivers leader changes on C (nil: no leader) until its
// context ends; C is then closed, and Err says why it stopped early (a
// server error that retrying does not cure), or is nil.
type Observer struct {
	C   <-chan *Leader
	mu  sync.Mutex
	err error
}

// Err: the error that ended the observation early, or nil.
func (ob *Observer) Err() error {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return ob.err
}

// Observe sends the leader now, then each change (another candidate,
// term or value; nil: no leader), polling every PollInterval. A lost
// connection is retried with back-off until CTX ends.
func (e *Election) Observe(ctx context.Context) *Observer {
	ch := make(chan *Leader)
	ob := &Observer{C: ch}
	go func() {
		defer close(ch)
		first, last := true, Leader{}
		backoff := retryMin
		for {
			ld, err := e.Leader(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				if serverError(err) {
					ob.mu.Lock()
					ob.err = err
					ob.mu.Unlock()
					return
				}
				if !sleep(ctx, backoff) {
					return
				}
				backoff = minDur(backoff*2, 5*time.Second)
				continue
			}
			backoff = retryMin
			key := Leader{}
			if ld != nil {
				key = Leader{Candidate: ld.Candidate, Value: ld.Value, Term: ld.Term}
			}
			if first || key != last {
				first, last = false, key
				select {
				case ch <- ld:
				case <-ctx.Done():
					return
				}
				continue
			}
			if !sleep(ctx, e.o.poll) {
				return
			}
		}
	}()
	return ob
}

// sleep D unless CTX ends first (false then).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
