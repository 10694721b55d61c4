// attack_test.go: a review's attacks on the client, kept as tests: the
// server's default lease on every kind (no false loss at acquisition),
// Observe never read, a pool of one connection, a context cancelled
// after the server granted the lock.
// Promises: P16

package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	dlock "github.com/dlock-pg/dlock-go"
)

// Every kind taken with the server's default lease (no Lease option):
// held, renewed, released; never declared lost as it is taken.
func TestDefaultLeaseEveryKind(t *testing.T) {
	t.Parallel()
	app := appDB(t, "")
	r := unique("deflease")
	check := func(what string, l *dlock.Lock, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if l.Lease() <= 0 || l.Err() != nil {
			t.Fatalf("%s: lease %v, Err %v", what, l.Lease(), l.Err())
		}
		if err := l.Release(bg()); err != nil {
			t.Fatalf("%s: Release: %v", what, err)
		}
	}
	l, err := dlock.Acquire(bg(), app, r+":x")
	check("exclusive", l, err)
	l, err = dlock.Acquire(bg(), app, r+":s", dlock.Shared())
	check("shared", l, err)
	l, err = dlock.Acquire(bg(), app, r+":sem", dlock.Semaphore(3), dlock.Permits(2))
	check("semaphore", l, err)
	l, err = dlock.AcquireAll(bg(), app, []string{r + ":a", r + ":b"})
	check("multi", l, err)
	e, err := dlock.NewElection(app, r+":e")
	if err != nil {
		t.Fatal(err)
	}
	l, err = e.Campaign(bg(), "v")
	check("leadership", l, err)
	if errors.Is(err, dlock.ErrLost) {
		t.Fatal("lost at once")
	}
}

// The server grants the lock but its answer comes after the context's
// deadline: Acquire fails, and the grant is released, not left held
// until its lease ends (the holder the caller chose, and a made-up one).
func TestGrantAfterDeadline(t *testing.T) {
	t.Parallel()
	admin := appDB(t, "")
	p := newProxy(t)
	// One round trip per statement: the acquisition is sent whole.
	app := open(t, p.dsn(), oneTrip)
	for _, holder := range []string{"", unique("holder")} {
		r := unique("late-grant")
		if err := app.PingContext(within(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		opts := []dlock.Option{dlock.Lease(time.Minute)}
		if holder != "" {
			opts = append(opts, dlock.Holder(holder))
		}
		p.hold()
		ctx, cancel := context.WithTimeout(bg(), 500*time.Millisecond)
		l, err := dlock.Acquire(ctx, app, r, opts...)
		cancel()
		p.release()
		t.Logf("holder %q: %v", holder, err)
		if err == nil {
			// Returned after all: then it must be held and releasable.
			if err := l.Release(bg()); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("holder %q: %v", holder, err)
		}
		ctx = within(t, 8*time.Second)
		for {
			h := row(t, admin, r)
			if !h.exists || !h.live {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("holder %q: the grant the caller was told failed is still held: %+v", holder, h)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// The application's search_path puts a schema of look-alike functions
// before pg_catalog: the client's statements still mean what they say.
// Here bool_and is always true: a multi-lock broken by an administrator
// must still fail AssertFence (55P03), Check and Release, and be lost.
func TestSearchPathLookAlikes(t *testing.T) {
	t.Parallel()
	admin := appDB(t, "")
	schema := fmt.Sprintf("go_evil_%d", os.Getpid())
	if _, err := admin.Exec(`CREATE SCHEMA ` + schema + `; CREATE FUNCTION ` + schema +
		`.yes(boolean, boolean) RETURNS boolean LANGUAGE sql AS 'SELECT true'; CREATE AGGREGATE ` +
		schema + `.bool_and(boolean) (sfunc = ` + schema + `.yes, stype = boolean, initcond = 'true')`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`) })
	app := appDB(t, "search_path="+schema+",pg_catalog,public")
	a, b := unique("path-a"), unique("path-b")
	m, err := dlock.AcquireAll(bg(), app, []string{a, b}, dlock.Lease(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(`SELECT dlock.break_lock($1)`, a); err != nil {
		t.Fatal(err)
	}
	tx, err := app.BeginTx(bg(), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = m.AssertFence(bg(), tx)
	_ = tx.Rollback()
	var de *dlock.Error
	if !errors.As(err, &de) || de.Code != "55P03" {
		t.Fatalf("AssertFence of a broken multi-lock: %v, want SQLSTATE 55P03", err)
	}
	if ok, err := m.Check(bg()); err != nil || ok {
		t.Fatalf("Check of a broken multi-lock: %v, %v", ok, err)
	}
	if !closed(within(t, 10*time.Second), m.Done()) {
		t.Fatal("Done not closed: the renewal says a broken multi-lock is held")
	}
	if err := m.Release(bg()); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Release of a broken multi-lock: %v, want ErrLost", err)
	}
}
