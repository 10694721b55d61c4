// session_test.go: sessions (dlock 1.1): one keepalive keeps every lock
// of a session (no renew), the session's loss closes every lock's Done
// before the ttl ends (keepalive backend terminated, paused, the session
// closed by an administrator, a stale fenced write refused), the server
// restarted, Close and Release, pgbouncer, and attacks (a grant answered
// as the session is lost, keepalive racing Close, use after Close, two
// sessions of one holder). Skipped where dlock has no sessions.
// Promises: P2 P16

package dlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	dlock "github.com/dlock-pg/dlock-go"
)

// hasSessions: whether the server's dlock has sessions.
func hasSessions(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var missing bool
	if err := db.QueryRow(`SELECT to_regprocedure('dlock.open_session(interval,text)') IS NULL`).Scan(&missing); err != nil {
		t.Fatal(err)
	}
	return !missing
}

func needSessions(t *testing.T, db *sql.DB) {
	t.Helper()
	if !hasSessions(t, db) {
		t.Skip("no sessions here: to_regprocedure('dlock.open_session(interval,text)') IS NULL")
	}
}

// sessionRow: the server's view of session ID: its holdings, and
// whether it is live (false, false: no such session).
func sessionRow(t *testing.T, admin *sql.DB, id int64) (holdings int, live bool) {
	t.Helper()
	err := admin.QueryRow(`SELECT holdings, expires_at > clock_timestamp() FROM dlock.sessions WHERE id = $1`, id).Scan(&holdings, &live)
	if err == sql.ErrNoRows {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return holdings, live
}

// sessionExpiry: the session's expiry on the server.
func sessionExpiry(t *testing.T, admin *sql.DB, id int64) (at time.Time) {
	t.Helper()
	if err := admin.QueryRow(`SELECT expires_at FROM dlock.sessions WHERE id = $1`, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// takeMany: N plain locks in S, plus one of each other kind; every lock.
func takeMany(t *testing.T, s *dlock.Session, n int) []*dlock.Lock {
	t.Helper()
	var locks []*dlock.Lock
	for i := 0; i < n; i++ {
		l, err := s.TryAcquire(bg(), unique("in-session"))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	add := func(l *dlock.Lock, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	add(s.TryAcquire(bg(), unique("shared"), dlock.Shared()))
	add(s.TryAcquire(bg(), unique("sem"), dlock.Semaphore(3), dlock.Permits(2)))
	add(s.TryAcquireAll(bg(), []string{unique("all-a"), unique("all-b")}))
	e, err := s.NewElection(unique("elect"))
	if err != nil {
		t.Fatal(err)
	}
	add(e.Campaign(bg(), "v", dlock.Wait(0)))
	return locks
}

func allDone(t *testing.T, locks []*dlock.Lock, d time.Duration, want error) {
	t.Helper()
	ctx := within(t, d)
	for i, l := range locks {
		if !closed(ctx, l.Done()) {
			t.Fatalf("lock %d (%s): Done not closed", i, l.Resource())
		}
		if !errors.Is(l.Err(), want) {
			t.Fatalf("lock %d: Err %v, want %v", i, l.Err(), want)
		}
	}
}

// One keepalive keeps every lock of the session: no dlock.renew is sent
// (counted on the wire), keepalives are; Release of one leaves the rest;
// Close releases all, each acquirable by another at once.
func TestSessionKeepsLocks(t *testing.T) {
	t.Parallel()
	admin := appDB(t, "")
	needSessions(t, admin)
	p := newProxy(t)
	app := open(t, p.dsn(), oneTrip) // every statement's text sent: no statement cache
	// 3 s: with 1.5 s, keepalives on the portable edition came too late on
	// a loaded machine (CI, three runs side by side).
	s, err := dlock.OpenSession(bg(), app, dlock.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	locks := takeMany(t, s, 6)
	time.Sleep(7 * time.Second) // past two ttls
	for i, l := range locks {
		if l.Err() != nil {
			t.Fatalf("lock %d lost: %v", i, l.Err())
		}
		if l.Session() != s || l.Holder() != s.Holder() {
			t.Fatalf("lock %d: session %v holder %q", i, l.Session(), l.Holder())
		}
	}
	if n, live := sessionRow(t, admin, s.ID()); n != 11 || !live {
		t.Fatalf("server: %d holdings live %v, want 11 live", n, live)
	}
	if renews, keeps := p.sentCount("dlock.renew("), p.sentCount("dlock.keepalive("); renews != 0 || keeps < 2 {
		t.Fatalf("sent %d renew and %d keepalive, want 0 and at least 2", renews, keeps)
	}
	release(t, locks[0])
	if n, live := sessionRow(t, admin, s.ID()); n != 10 || !live {
		t.Fatalf("after one Release: %d holdings live %v", n, live)
	}
	for _, l := range locks[1:] {
		if l.Err() != nil {
			t.Fatalf("another lock ended with one Release: %v", l.Err())
		}
	}
	if err := s.Close(bg()); err != nil {
		t.Fatal(err)
	}
	allDone(t, locks[1:], time.Second, dlock.ErrReleased)
	if !errors.Is(s.Err(), dlock.ErrClosed) {
		t.Fatalf("session Err after Close: %v", s.Err())
	}
	var left int
	if err := admin.QueryRow(`SELECT count(*) FROM dlock.locks WHERE session = $1`, s.ID()).Scan(&left); err != nil || left != 0 {
		t.Fatalf("holdings left after Close: %d (%v)", left, err)
	}
	for _, l := range locks[1:5] {
		o, err := dlock.TryAcquire(bg(), admin, l.Resource(), dlock.Lease(5*time.Second))
		if err != nil {
			t.Fatalf("%s not free after Close: %v", l.Resource(), err)
		}
		release(t, o)
	}
}

// lossBeforeEnd: S's locks all lost, each while the server still had the
// session live (the loss is signalled before the ttl ends).
func lossBeforeEnd(t *testing.T, admin *sql.DB, s *dlock.Session, locks []*dlock.Lock) {
	t.Helper()
	dones := []<-chan struct{}{s.Done()}
	for _, l := range locks {
		dones = append(dones, l.Done())
	}
	lostInTime(t, 30*time.Second, func() (at time.Time) {
		_ = admin.QueryRow(`SELECT expires_at FROM dlock.sessions WHERE id = $1`, s.ID()).Scan(&at)
		return at
	}, dones...)
	allDone(t, locks, time.Second, dlock.ErrLost)
	if !closed(within(t, time.Second), s.Done()) || !errors.Is(s.Err(), dlock.ErrLost) {
		t.Fatalf("session: %v", s.Err())
	}
}

// The keepalive's backends terminated, and no new connection possible:
// every lock is lost before the session ends on the server.
func TestSessionKeepaliveTerminated(t *testing.T) {
	t.Parallel()
	admin := appDB(t, "")
	needSessions(t, admin)
	p := newProxy(t)
	name := fmt.Sprintf("go-test-sess-kill-%d", os.Getpid())
	app := open(t, p.dsn(), "application_name="+name)
	// A 6 s ttl: with 3 s, a keepalive after a terminate once came too
	// late on a loaded machine (CI).
	s, err := dlock.OpenSession(bg(), app, dlock.TTL(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	locks := takeMany(t, s, 3)
	// Terminated alone: keepalives reconnect, the session is kept. Each
	// round waits for a keepalive answered on a new connection (the
	// session's expiry moves), for longer than the ttl in all. (Rounds at
	// a fixed 500 ms outran reconnections on a loaded machine.)
	for i, start := 0, time.Now(); time.Since(start) < 7*time.Second; i++ {
		if _, err := admin.Exec(`SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1`, name); err != nil {
			t.Fatal(err)
		}
		before := sessionExpiry(t, admin, s.ID())
		for !sessionExpiry(t, admin, s.ID()).After(before) {
			if s.Err() != nil || time.Since(start) > 30*time.Second {
				t.Fatalf("round %d: lost, though keepalives could reconnect: %v", i, s.Err())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	p.blockNew()
	if _, err := admin.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, name); err != nil {
		t.Fatal(err)
	}
	// A connection still in its startup (no application_name yet) escaped
	// the terminate once and kept the session alive (CI, pgx4 on 17): cut
	// every connection through the proxy too.
	p.cutAll()
	lossBeforeEnd(t, admin, s, locks)
	p.heal()
	if err := s.Close(bg()); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Close of a lost session: %v", err)
	}
}

// The keepalive's backend paused (SIGSTOP) and no new connection
// possible: every lock lost before the session ends on the server.
func TestSessionKeepalivePaused(t *testing.T) {
	t.Parallel()
	admin := appDB(t, "")
	needSessions(t, admin)
	p := newProxy(t)
	name := fmt.Sprintf("go-test-sess-stop-%d", os.Getpid())
	app := open(t, p.dsn(), "application_name="+name)
	s, err := dlock.OpenSession(bg(), app, dlock.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	locks := takeMany(t, s, 3)
	p.blockNew()
	defer p.heal()
	// A connection accepted before the block registers its
	// application_name at the end of its startup: let it, then pause.
	until(t, "every connection started", p.started)
	defer pause(t, admin, name)()
	lossBeforeEnd(t, admin, s, locks)
}

// The session closed by an administrator: every lock lost (keepalive
// returns NULL); a stale lock's fenced write is refused (55P03).
func TestSessionClosedByAdministrator(t *testing.T) {
	t.Parallel()
	app, admin := appDB(t, ""), appDB(t, "")
	needSessions(t, admin)
	s, err := dlock.OpenSession(bg(), app, dlock.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	locks := takeMany(t, s, 3)
	var n sql.NullInt64
	if err := admin.QueryRow(`SELECT dlock.close_session($1)`, s.ID()).Scan(&n); err != nil || n.Int64 != 8 {
		t.Fatalf("close_session: %v %v", n, err)
	}
	allDone(t, locks, 10*time.Second, dlock.ErrLost)
	stale := locks[0]
	cur, err := dlock.Acquire(bg(), app, stale.Resource(), dlock.Lease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, cur)
	tx, err := app.BeginTx(bg(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	err = stale.AssertFence(bg(), tx)
	var e *dlock.Error
	if !errors.As(err, &e) || e.Code != "55P03" {
		t.Fatalf("the stale lock's fenced write: %v, want 55P03", err)
	}
	if err := stale.Release(bg()); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Release of a lock of a closed session: %v", err)
	}
	if err := s.Close(bg()); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Close of a session closed by another: %v", err)
	}
}

// The server stopped and restarted within the ttl: keepalives are retried
// until it is back; the session and its locks are kept. Not parallel.
func TestSessionServerRestart(t *testing.T) {
	needPgCtl(t)
	needSessions(t, appDB(t, ""))
	// Pools first used after the restart (pgx v4 hands out a connection the
	// restart closed, with 57P01).
	app, admin := appDB(t, ""), appDB(t, "")
	const ttl = 12 * time.Second
	start := time.Now()
	s, err := dlock.OpenSession(bg(), app, dlock.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	locks := takeMany(t, s, 2)
	time.Sleep(time.Second)
	// Down past the keepalive due a third of the ttl after the open.
	restartWithin(t, ttl, start.Add(ttl/3), func() time.Time { return sessionExpiry(t, admin, s.ID()) })
	if s.Err() != nil {
		t.Fatalf("lost: %v", s.Err())
	}
	app.SetMaxIdleConns(0) // no idle connection from before the restart (pgx v4: 57P01)
	for _, l := range locks {
		if ok, err := l.Check(bg()); !ok || err != nil || l.Err() != nil {
			t.Fatalf("%s: check %v %v, Err %v", l.Resource(), ok, err, l.Err())
		}
	}
	if n, live := sessionRow(t, admin, s.ID()); n != 7 || !live {
		t.Fatalf("server: %d holdings live %v", n, live)
	}
	if err := s.Close(bg()); err != nil {
		t.Fatal(err)
	}
}

// Behind pgbouncer in transaction pooling: kept past its ttl, closed. Not
// parallel: the tests' pgbouncer has a pool of two server connections,
// which other tests' waits hold (and a keepalive queued behind them would
// be late, as the README says).
func TestSessionBouncer(t *testing.T) {
	admin := appDB(t, "")
	needSessions(t, admin)
	db := bouncerDB(t)
	// 6 s: with 1.5 s, a keepalive queued for one of pgbouncer's server
	// connections had 0.85 s to get through (CI under load).
	s, err := dlock.OpenSession(bg(), db, dlock.TTL(6*time.Second), dlock.Holder(unique("bouncer")))
	if err != nil {
		t.Fatal(err)
	}
	locks := takeMany(t, s, 3)
	time.Sleep(8 * time.Second) // past the ttl
	if s.Err() != nil {
		t.Fatalf("lost behind pgbouncer: %v", s.Err())
	}
	if n, live := sessionRow(t, admin, s.ID()); n != 8 || !live {
		t.Fatalf("server: %d holdings live %v", n, live)
	}
	release(t, locks[1])
	if err := s.Close(bg()); err != nil {
		t.Fatal(err)
	}
	allDone(t, append(locks[:1], locks[2:]...), time.Second, dlock.ErrReleased)
}

// On dlock 1.0 (no open_session): a clear error with the SQLSTATE.
func TestSessionOnOldServer(t *testing.T) {
	t.Parallel()
	app := appDB(t, "")
	if hasSessions(t, app) {
		t.Skip("this server has sessions (dlock.open_session(interval,text) exists)")
	}
	_, err := dlock.OpenSession(bg(), app, dlock.TTL(time.Second))
	var e *dlock.Error
	if !errors.As(err, &e) || e.Code != "42883" || !strings.Contains(e.Error(), "no sessions") {
		t.Fatalf("OpenSession on dlock 1.0: %v", err)
	}
}

// Bad options, and use after Close.
func TestSessionMisuse(t *testing.T) {
	t.Parallel()
	app := appDB(t, "")
	needSessions(t, app)
	var e *dlock.Error
	if _, err := dlock.OpenSession(bg(), app, dlock.Lease(time.Second)); !errors.As(err, &e) || e.Code != "22023" {
		t.Fatalf("OpenSession with a lease: %v", err)
	}
	s, err := dlock.OpenSession(bg(), app) // the server's default ttl
	if err != nil {
		t.Fatal(err)
	}
	if s.TTL() != 30*time.Second {
		t.Fatalf("default ttl %v", s.TTL())
	}
	if _, err := s.TryAcquire(bg(), unique("x"), dlock.Lease(time.Second)); !errors.As(err, &e) || e.Code != "22023" {
		t.Fatalf("a lease in a session: %v", err)
	}
	if _, err := s.TryAcquire(bg(), unique("x"), dlock.Holder("someone-else")); !errors.As(err, &e) || e.Code != "22023" {
		t.Fatalf("another holder in a session: %v", err)
	}
	l, err := s.TryAcquire(bg(), unique("after"))
	if err != nil {
		t.Fatal(err)
	}
	el, err := s.NewElection(unique("after-elect"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(bg()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(bg()); err != nil {
		t.Fatalf("Close twice: %v", err)
	}
	if err := l.Release(bg()); err != nil {
		t.Fatalf("Release after Close: %v", err)
	}
	if _, err := s.TryAcquire(bg(), unique("after")); !errors.As(err, &e) || e.Code != "55000" {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	if _, err := el.Campaign(bg(), "v", dlock.Wait(0)); !errors.As(err, &e) || e.Code != "55000" {
		t.Fatalf("Campaign after Close: %v", err)
	}
}

// Attack: the answer of an acquisition held back until the session is
// declared lost. The late grant must not yield a live-looking lock.
func TestSessionGrantAsLost(t *testing.T) {
	t.Parallel()
	admin := appDB(t, "")
	needSessions(t, admin)
	p := newProxy(t)
	app := open(t, p.dsn(), "")
	s, err := dlock.OpenSession(bg(), app, dlock.TTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := unique("late-grant")
	p.hold()
	type res struct {
		l   *dlock.Lock
		err error
	}
	got := make(chan res, 1)
	go func() {
		l, err := s.Acquire(bg(), r)
		got <- res{l, err}
	}()
	if !closed(within(t, 20*time.Second), s.Done()) {
		t.Fatal("the session was not declared lost while its keepalives were held")
	}
	p.release()
	g := <-got
	if g.err == nil {
		select {
		case <-g.l.Done():
		default:
			t.Fatal("a lock granted as its session was lost looks held")
		}
	} else if !errors.Is(g.err, dlock.ErrLost) && !errors.Is(g.err, dlock.ErrNotAcquired) {
		var e *dlock.Error
		if !errors.As(g.err, &e) || e.Code != "55000" {
			t.Fatalf("the late grant: %v", g.err)
		}
	}
}

// Attack: keepalives racing Close (random delays, seeded): Close wins
// cleanly every time, every lock released, nothing left on the server.
// A keepalive every second, Close at any point of two periods. (With a 1 s
// ttl, keepalives that take over 333 ms on a loaded machine lose the
// session before Close: CI, pgx5 on 18, "context deadline exceeded".)
func TestSessionKeepaliveRacesClose(t *testing.T) {
	t.Parallel()
	app, admin := appDB(t, ""), appDB(t, "")
	needSessions(t, admin)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	for i := 0; i < 10; i++ {
		s, err := dlock.OpenSession(bg(), app, dlock.TTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.TryAcquire(bg(), unique("race-a"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.TryAcquire(bg(), unique("race-b"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.Intn(2100)) * time.Millisecond)
		done := make(chan error, 2)
		go func() { done <- s.Close(bg()) }()
		go func() { done <- s.Close(bg()) }()
		for j := 0; j < 2; j++ {
			if err := <-done; err != nil {
				t.Fatalf("iteration %d: Close: %v", i, err)
			}
		}
		allDone(t, []*dlock.Lock{a, b}, time.Second, dlock.ErrReleased)
		if h := row(t, admin, a.Resource()); h.exists && h.live {
			t.Fatalf("iteration %d: still held after Close: %+v", i, h)
		}
	}
	time.Sleep(time.Second) // a late keepalive answer must not resurrect or lose anything
}

// Attack: two sessions of one holder. Neither takes the other's holding;
// closing one leaves the other's locks.
func TestSessionTwoOfOneHolder(t *testing.T) {
	t.Parallel()
	app := appDB(t, "")
	needSessions(t, app)
	h := unique("holder")
	s1, err := dlock.OpenSession(bg(), app, dlock.TTL(5*time.Second), dlock.Holder(h))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := dlock.OpenSession(bg(), app, dlock.TTL(5*time.Second), dlock.Holder(h))
	if err != nil {
		t.Fatal(err)
	}
	r := unique("two")
	l1, err := s1.TryAcquire(bg(), r)
	if err != nil {
		t.Fatal(err)
	}
	if l2, err := s2.TryAcquire(bg(), r); err == nil {
		t.Fatalf("the second session of the holder got %s too (fence %d)", r, l2.Fence())
	}
	mine, err := s2.TryAcquire(bg(), unique("two-other"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(bg()); err != nil {
		t.Fatal(err)
	}
	if !closed(within(t, time.Second), mine.Done()) {
		t.Fatal("s2's lock not ended by its Close")
	}
	ctx, cancel := context.WithTimeout(bg(), 5*time.Second)
	defer cancel()
	if ok, err := l1.Check(ctx); !ok || err != nil || l1.Err() != nil {
		t.Fatalf("s1's lock after s2's Close: %v %v %v", ok, err, l1.Err())
	}
	if err := s1.Close(bg()); err != nil {
		t.Fatal(err)
	}
}
