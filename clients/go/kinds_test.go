// kinds_test.go: shared locks, semaphores and multi-locks (dlock 1.0's
// lock(shared => true), acquire(semaphore, ...) and lock_all), and
// elections with a channel of leader changes.
// Promises: P8 P9 P10 P11 P16

package dlock_test

import (
	"errors"
	"testing"
	"time"

	dlock "github.com/dlock-pg/dlock-go"
)

func release(t *testing.T, l *dlock.Lock) {
	t.Helper()
	if err := l.Release(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestShared(t *testing.T) {
	t.Parallel()
	app := appDB(t, "")
	r := unique("shared")
	r1, err := dlock.Acquire(bg(), app, r, dlock.Shared(), dlock.Wait(0), dlock.Lease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := dlock.TryAcquire(bg(), app, r, dlock.Shared(), dlock.Lease(5*time.Second))
	if err != nil {
		t.Fatalf("a second shared holder: %v", err)
	}
	if r2.Fence() <= r1.Fence() {
		t.Fatalf("fence %d after %d", r2.Fence(), r1.Fence())
	}
	if _, err := dlock.TryAcquire(bg(), app, r); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a writer while readers hold: %v", err)
	}
	release(t, r1)
	release(t, r2)
	w, err := dlock.TryAcquire(bg(), app, r, dlock.Lease(5*time.Second))
	if err != nil || w.Fence() <= r2.Fence() {
		t.Fatalf("the writer after the readers: %v", err)
	}
	if _, err := dlock.TryAcquire(bg(), app, r, dlock.Shared()); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a reader while the writer holds: %v", err)
	}
	release(t, w)
}

func TestSemaphore(t *testing.T) {
	t.Parallel()
	app := appDB(t, "")
	r := unique("semaphore")
	a, err := dlock.Acquire(bg(), app, r, dlock.Semaphore(3), dlock.Permits(2), dlock.Lease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if a.Permits() != 2 {
		t.Fatalf("permits %d", a.Permits())
	}
	b, err := dlock.TryAcquire(bg(), app, r, dlock.Semaphore(3), dlock.Lease(5*time.Second))
	if err != nil {
		t.Fatalf("the third permit: %v", err)
	}
	if _, err := dlock.TryAcquire(bg(), app, r, dlock.Semaphore(3)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a fourth permit of three: %v", err)
	}
	release(t, a)
	c, err := dlock.TryAcquire(bg(), app, r, dlock.Semaphore(3), dlock.Permits(2), dlock.Lease(5*time.Second))
	if err != nil {
		t.Fatalf("two permits after two came back: %v", err)
	}
	release(t, b)
	release(t, c)
}

func TestAcquireAll(t *testing.T) {
	t.Parallel()
	app, admin := appDB(t, ""), appDB(t, "")
	a, b := unique("all-a"), unique("all-b `\"{,}\\")
	one, err := dlock.TryAcquire(bg(), app, b, dlock.Lease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dlock.TryAcquireAll(bg(), app, []string{a, b}); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("all of them while one is held: %v", err)
	}
	if h := row(t, admin, a); h.exists {
		t.Fatal("all or nothing: one was taken")
	}
	release(t, one)
	m, err := dlock.AcquireAll(bg(), app, []string{a, b}, dlock.Lease(3*time.Second), dlock.Wait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := m.Fences()
	if len(f) != 2 || row(t, admin, a).fence != f[0] || row(t, admin, b).fence != f[1] {
		t.Fatalf("fences %v", f)
	}
	time.Sleep(4 * time.Second) // past the lease: renewed together
	if m.Err() != nil || !row(t, admin, b).live {
		t.Fatalf("not renewed: %v", m.Err())
	}
	tx, err := app.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AssertFence(bg(), tx); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()
	if _, err := admin.Exec(`SELECT dlock.break_lock($1)`, b); err != nil {
		t.Fatal(err)
	}
	if !closed(within(t, 10*time.Second), m.Done()) {
		t.Fatal("the loss of one is not the loss of the whole")
	}
	_ = m.Release(bg())
}

func TestElection(t *testing.T) {
	t.Parallel()
	app := appDB(t, "")
	name := unique("election")
	e1, err := dlock.NewElection(app, name, dlock.Lease(3*time.Second), dlock.PollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	e2, _ := dlock.NewElection(app, name, dlock.Lease(3*time.Second))
	ctx := within(t, 60*time.Second)
	ob := e1.Observe(ctx)
	if ld := <-ob.C; ld != nil {
		t.Fatalf("a leader before any campaign: %+v", ld)
	}
	lead, err := e1.Campaign(bg(), "one")
	if err != nil {
		t.Fatal(err)
	}
	if ld := <-ob.C; ld == nil || ld.Candidate != e1.Candidate() || ld.Value != "one" || ld.Term != lead.Fence() {
		t.Fatalf("observed %+v", ld)
	}
	if again, err := e1.Campaign(bg(), "one"); err != nil || again != lead {
		t.Fatalf("campaigning again while leading: %v %v", again, err)
	}
	if _, err := e2.Campaign(bg(), "two", dlock.Wait(200*time.Millisecond)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a second candidate while one leads: %v", err)
	}
	if ok, err := e1.Proclaim(bg(), "uno"); !ok || err != nil {
		t.Fatalf("proclaim: %v %v", ok, err)
	}
	if ld := <-ob.C; ld == nil || ld.Value != "uno" {
		t.Fatalf("observed %+v", ld)
	}
	time.Sleep(3750 * time.Millisecond) // past the lease: renewed
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := e2.Campaign(ctx, "two")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	if err := e1.Resign(bg()); err != nil {
		t.Fatalf("resign: %v", err)
	}
	second := <-got
	if second == nil || second.Fence() <= lead.Fence() {
		t.Fatalf("the second leader: %v", second)
	}
	for ld := range ob.C {
		if ld != nil && ld.Candidate == e2.Candidate() {
			break
		}
	}
	if ok, _ := e1.Proclaim(bg(), "late"); ok {
		t.Fatal("a resigned leader proclaimed")
	}
	if err := e2.Resign(bg()); err != nil {
		t.Fatal(err)
	}
}
