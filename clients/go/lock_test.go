// lock_test.go: locks on a real server: acquire and release, waits and
// contexts, fences, AssertFence (a stale holder's write refused with
// 55P03), bad input refused with a SQLSTATE, through pgbouncer.
// Promises: P1 P2 P6 P16

package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	dlock "github.com/dlock-pg/dlock-go"
)

func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	app, admin := appDB(t, ""), appDB(t, "")
	r := unique("acquire")
	lock, err := dlock.Acquire(bg(), app, r)
	if err != nil {
		t.Fatal(err)
	}
	if lock.Fence() <= 0 || lock.Err() != nil || lock.Resource() != r {
		t.Fatalf("fence %d, err %v, resource %q", lock.Fence(), lock.Err(), lock.Resource())
	}
	if lock.Lease() != 30*time.Second {
		t.Errorf("lease %v, want the server's default read back (30s)", lock.Lease())
	}
	if h := row(t, admin, r); !h.live || h.holder != lock.Holder() || h.fence != lock.Fence() {
		t.Fatalf("server has %+v", h)
	}
	_, err = dlock.TryAcquire(bg(), app, r)
	var e *dlock.Error
	if !errors.As(err, &e) || e.Code != "55P03" || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a second lock object of this process got %v, want 55P03 ErrNotAcquired", err)
	}
	if ok, err := lock.Check(bg()); !ok || err != nil {
		t.Fatalf("check: %v %v", ok, err)
	}
	if err := lock.Release(bg()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lock.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(lock.Err(), dlock.ErrReleased) {
		t.Fatalf("Err after Release: %v", lock.Err())
	}
	if err := lock.Release(bg()); err != nil {
		t.Fatalf("a second Release: %v", err)
	}
	if h := row(t, admin, r); h.exists {
		t.Fatalf("still held after Release: %+v", h)
	}
	named, err := dlock.Acquire(bg(), app, r, dlock.Holder("go-test-holder"), dlock.Lease(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if named.Holder() != "go-test-holder" || named.Lease() != 2*time.Minute || named.Fence() <= lock.Fence() {
		t.Fatalf("holder %q lease %v fence %d", named.Holder(), named.Lease(), named.Fence())
	}
	if err := named.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestWaits(t *testing.T) {
	t.Parallel()
	app := appDB(t, "")
	r := unique("wait")
	held, err := dlock.Acquire(bg(), app, r, dlock.Lease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dlock.Acquire(bg(), app, r, dlock.Wait(300*time.Millisecond)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Wait(300ms) on a busy resource: %v", err)
	}
	ctx, cancel := context.WithTimeout(bg(), 500*time.Millisecond)
	_, err = dlock.Acquire(ctx, app, r)
	cancel()
	var e *dlock.Error
	if !errors.As(err, &e) || e.Code != "55P03" {
		t.Fatalf("a context deadline on a busy resource: %v, want 55P03", err)
	}
	// A waiter gets it once it is released, with a higher fence.
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := dlock.Acquire(within(t, 20*time.Second), app, r)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(200 * time.Millisecond)
	if err := held.Release(bg()); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil || l.Fence() <= held.Fence() {
		t.Fatalf("the waiter: %v", l)
	}
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestFencesIncrease(t *testing.T) {
	t.Parallel()
	app := appDB(t, "")
	r := unique("fences")
	var last int64
	for i := 0; i < 5; i++ {
		l, err := dlock.Acquire(bg(), app, r, dlock.Lease(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d after %d", l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(bg()); err != nil {
			t.Fatal(err)
		}
	}
}

// A stale holder's fenced write is refused with 55P03 in its transaction;
// the current holder's goes through.
func TestAssertFence(t *testing.T) {
	t.Parallel()
	app, admin := appDB(t, ""), appDB(t, "")
	r := unique("assert")
	if _, err := admin.Exec(`CREATE TABLE IF NOT EXISTS go_fenced (resource text PRIMARY KEY, fence bigint)`); err != nil {
		t.Fatal(err)
	}
	old, err := dlock.Acquire(bg(), app, r, dlock.Lease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(`SELECT dlock.break_lock($1)`, r); err != nil {
		t.Fatal(err)
	}
	cur, err := dlock.Acquire(bg(), app, r, dlock.Lease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	write := func(l *dlock.Lock) error {
		tx, err := app.BeginTx(bg(), nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := l.AssertFence(bg(), tx); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO go_fenced VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence`,
			r, l.Fence()); err != nil {
			return err
		}
		return tx.Commit()
	}
	err = write(old)
	var e *dlock.Error
	if !errors.As(err, &e) || e.Code != "55P03" {
		t.Fatalf("the stale holder's write: %v, want 55P03", err)
	}
	var s interface{ SQLState() string }
	if !errors.As(e.Err, &s) || s.SQLState() != "55P03" {
		t.Fatalf("the driver's error is not wrapped: %#v", e.Err)
	}
	if err := write(cur); err != nil {
		t.Fatalf("the current holder's write: %v", err)
	}
	var fence int64
	if err := admin.QueryRow(`SELECT fence FROM go_fenced WHERE resource = $1`, r).Scan(&fence); err != nil || fence != cur.Fence() {
		t.Fatalf("written fence %d (%v), want %d", fence, err, cur.Fence())
	}
	if err := cur.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if err := write(cur); !errors.As(err, &e) || e.Code != "55P03" {
		t.Fatalf("a write after Release: %v, want 55P03", err)
	}
	if err := old.Release(bg()); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Release of the broken lock: %v, want ErrLost", err)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	app, admin := appDB(t, ""), appDB(t, "")
	r := unique("bad")
	cases := []struct {
		resource string
		opts     []dlock.Option
		code     string
	}{
		{"", nil, "22023"},
		{strings.Repeat("x", 1001), nil, "22023"},
		{r, []dlock.Option{dlock.Holder("")}, "22023"},
		{r, []dlock.Option{dlock.Lease(-5 * time.Second)}, "22023"},
		{r, []dlock.Option{dlock.Lease(0)}, "22023"},
		{r, []dlock.Option{dlock.Wait(-time.Second)}, "22023"},
		{r, []dlock.Option{dlock.Permits(2)}, "22023"},
		{r, []dlock.Option{dlock.Semaphore(2), dlock.Permits(3)}, "22023"},
	}
	for i, c := range cases {
		_, err := dlock.Acquire(bg(), app, c.resource, c.opts...)
		var e *dlock.Error
		if !errors.As(err, &e) || e.Code != c.code {
			t.Errorf("case %d: %v, want %s", i, err, c.code)
		}
	}
	if _, err := dlock.Acquire(bg(), nil, r); err == nil {
		t.Error("a nil *sql.DB accepted")
	}
	var n int
	if err := admin.QueryRow(`SELECT count(*) FROM dlock.locks WHERE resource = $1`, r).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d holdings left (%v)", n, err)
	}
}

// Through pgbouncer in transaction pooling: renewals keep the lock while
// other clients' statements share the server connections.
func TestBouncer(t *testing.T) {
	b := bouncerDB(t)
	admin := appDB(t, "")
	r := unique("bouncer")
	// 6 s: each renewal waits its turn for one of pgbouncer's two server
	// connections; with 1.5 s it had 0.85 s to get through (CI under load).
	l, err := dlock.Acquire(bg(), b, r, dlock.Lease(6*time.Second), dlock.Wait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 80; i++ { // 12 s: twice the lease
		if _, err := b.Exec(`SELECT dlock.try_lock($1, 'someone', '5s')`, r+"/x"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	if l.Err() != nil {
		t.Fatalf("lost behind pgbouncer: %v", l.Err())
	}
	if h := row(t, admin, r); !h.live || h.fence != l.Fence() {
		t.Fatalf("server has %+v", h)
	}
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
	if h := row(t, admin, r); h.exists {
		t.Fatalf("still held: %+v", h)
	}
}
