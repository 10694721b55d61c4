// review2_test.go: a review's attacks (stop 57), kept as tests: a pool
// whose idle connections the server closed (acquire, renew and release
// go through on a live one), a process past its renewal deadline before
// the loop's timer fired (Err and Done say lost), the caller's
// lock_timeout ending a wait (ErrNotAcquired), and a lost lock released
// twice (the loss told once).
// Promises: P16

package dlock_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	dlock "github.com/dlock-pg/dlock-go"
)

// idlePool: a pool of N idle connections, application_name NAME.
func idlePool(t *testing.T, name string, n int) *sql.DB {
	db := open(t, os.Getenv("DLOCK_TEST_DSN"), "application_name="+name)
	db.SetMaxOpenConns(n + 2)
	db.SetMaxIdleConns(n + 2)
	fillIdle(t, db, n)
	return db
}

// fillIdle: N live connections of DB taken at once, then idle in its
// pool. A dead one still in the pool (ended by the last killIdle, and
// not used since) is dropped on the way.
func fillIdle(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	conns := make([]*sql.Conn, 0, n)
	for dead := 0; len(conns) < n; {
		c, err := db.Conn(bg())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PingContext(bg()); err != nil {
			_ = c.Raw(func(interface{}) error { return driver.ErrBadConn })
			c.Close()
			if dead++; dead > 2*n {
				t.Fatal(err)
			}
			continue
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	if idle := db.Stats().Idle; idle < n {
		t.Fatalf("%d idle connections, want %d", idle, n)
	}
}

// killIdle: the server ends every idle backend of NAME (as a restart, a
// failover, idle_session_timeout or a proxy would); waits until those
// are gone (not until none is idle: a renewal's new connection, idle in
// the pool, once counted as one left). The number ended.
func killIdle(t *testing.T, admin *sql.DB, name string) int {
	t.Helper()
	var n int
	var pids string
	err := admin.QueryRow(`SELECT count(*) FILTER (WHERE ended), coalesce(string_agg(pid::text, ',') FILTER (WHERE ended), '') `+
		`FROM (SELECT pid, pg_terminate_backend(pid) AS ended FROM pg_stat_activity `+
		`WHERE application_name = $1 AND state = 'idle') AS idle`, name).Scan(&n, &pids)
	if err != nil {
		t.Fatal(err)
	}
	ctx := within(t, 10*time.Second)
	for {
		var left int
		if err := admin.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(string_to_array($1, ',')::int[])`,
			pids).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return n
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			t.Fatalf("%d idle backends of %s still there", left, name)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// Six dead idle connections in the caller's pool: Acquire, the renewals
// of a 6 s lease (each on a new connection, as after a backend kill: 3 s
// left it 1.7 s on a loaded machine) and Release each get through on a live connection (they
// returned "driver: bad connection", and the renewals spent the lease on
// back-off until the lock was lost with the server healthy).
func TestDeadIdleConnections(t *testing.T) {
	t.Parallel()
	name := unique("deadidle")
	app, admin := idlePool(t, name, 6), appDB(t, "")
	if n := killIdle(t, admin, name); n < 6 {
		t.Fatalf("ended %d idle backends, want 6", n)
	}
	r := unique("deadidle")
	l, err := dlock.Acquire(within(t, 10*time.Second), app, r, dlock.Lease(6*time.Second))
	if err != nil {
		t.Fatalf("Acquire through dead idle connections: %v", err)
	}
	// Renewals: every idle connection dies again before each one (8 s:
	// past the lease).
	for i := 0; i < 8; i++ {
		fillIdle(t, app, 6)
		killIdle(t, admin, name)
		time.Sleep(time.Second)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lost through dead idle connections, the server healthy: %v", err)
	}
	if h := row(t, admin, r); !h.live || h.fence != l.Fence() {
		t.Fatalf("server: %+v, want fence %d live", h, l.Fence())
	}
	fillIdle(t, app, 6)
	killIdle(t, admin, name)
	if err := l.Release(within(t, 10*time.Second)); err != nil {
		t.Fatalf("Release through dead idle connections: %v", err)
	}
	if h := row(t, admin, r); h.live {
		t.Fatalf("still held after Release: %+v", h)
	}
}

// A lock (and a session) past its renewal deadline before the loop's
// timer fired, as a process paused (SIGSTOP, a long GC) finds it on
// resuming: Err says lost and Done is closed at the first look.
func TestPastDeadlineLostAtOnce(t *testing.T) {
	t.Parallel()
	app := appDB(t, "")
	l, err := dlock.Acquire(bg(), app, unique("paused"), dlock.Lease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg())
	if err := l.Err(); err != nil {
		t.Fatalf("Err before the deadline: %v", err)
	}
	dlock.PastDeadline(l)
	if err := l.Err(); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Err past the deadline: %v, want ErrLost", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done open past the deadline")
	}
	// Done alone judges too.
	l2, err := dlock.Acquire(bg(), app, unique("paused"), dlock.Lease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(bg())
	dlock.PastDeadline(l2)
	select {
	case <-l2.Done():
	default:
		t.Fatal("Done open past the deadline")
	}
	if !hasSessions(t, app) {
		return
	}
	s, err := dlock.OpenSession(bg(), app, dlock.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(bg())
	sl, err := s.Acquire(bg(), unique("paused"))
	if err != nil {
		t.Fatal(err)
	}
	dlock.SessionPastDeadline(s)
	if err := sl.Err(); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("a session's lock past the session's deadline: %v, want ErrLost", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("session's Done open past its deadline")
	}
}

// The caller's lock_timeout ends a wait: ErrNotAcquired with 55P03, as
// when Wait runs out (it was a plain error).
func TestLockTimeoutNotAcquired(t *testing.T) {
	t.Parallel()
	app, short := appDB(t, ""), appDB(t, "lock_timeout=300")
	r := unique("locktimeout")
	l, err := dlock.Acquire(bg(), app, r, dlock.Lease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg())
	_, err = dlock.Acquire(within(t, 20*time.Second), short, r, dlock.Wait(2*time.Second))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire under lock_timeout: %v, want ErrNotAcquired", err)
	}
	var e *dlock.Error
	if !errors.As(err, &e) || e.Code != "55P03" {
		t.Fatalf("Acquire under lock_timeout: %v, want Code 55P03", err)
	}
}

// A lost lock released twice: the first Release returns the loss, the
// second nil, as the documentation says ("Releasing twice returns nil").
func TestReleaseLostTwice(t *testing.T) {
	t.Parallel()
	app, admin := appDB(t, ""), appDB(t, "")
	r := unique("losttwice")
	l, err := dlock.Acquire(bg(), app, r, dlock.Lease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(`SELECT dlock.break_lock($1)`, r); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	if err := l.Release(bg()); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("first Release of a broken lock: %v, want ErrLost", err)
	}
	for i := range errs {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = l.Release(bg()) }(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("Release again: %v, want nil", err)
		}
	}
	if !errors.Is(l.Err(), dlock.ErrLost) {
		t.Fatalf("Err after the Releases: %v, want ErrLost still", l.Err())
	}
}

// Leader of an election with no leader (no row) on a pool of idle
// connections: an answer, not a dead connection; none is closed (each
// call closed them all, one after the other, sending it again on each).
func TestLeaderNoneKeepsConnections(t *testing.T) {
	t.Parallel()
	name := unique("noleader")
	db := idlePool(t, name, 4)
	e, err := dlock.NewElection(db, unique("noleader"))
	if err != nil {
		t.Fatal(err)
	}
	admin := appDB(t, "")
	pids := func() string {
		var p sql.NullString
		if err := admin.QueryRow(`SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity `+
			`WHERE application_name = $1`, name).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p.String
	}
	before := pids()
	for i := 0; i < 5; i++ {
		l, err := e.Leader(bg())
		if err != nil || l != nil {
			t.Fatalf("Leader with none: %v, %v", l, err)
		}
	}
	if after := pids(); after != before {
		t.Fatalf("the pool's backends changed: %s -> %s (connections closed)", before, after)
	}
}
