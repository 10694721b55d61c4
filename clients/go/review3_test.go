// review3_test.go: a review's attacks (stop 58), kept as tests: a
// release whose answer is lost after it committed is not sent again, so
// it takes no second count of a holding shared through one holder text;
// nor is a session's close (again, it said the session was lost).
// Promises: P16

package dlock_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	dlock "github.com/dlock-pg/dlock-go"
)

// A and B hold one resource through one holder text (count 2). A's
// release commits, then its connection dies before the answer arrives.
// Sending it again would end B's count too: B would think it held a lock
// that anyone could take.
func TestReleaseAnswerLostSharedHolder(t *testing.T) {
	t.Parallel()
	admin := appDB(t, "")
	p := newProxy(t)
	app := open(t, p.dsn(), "")
	r, h := unique("lost-release"), unique("shared-holder")
	a, err := dlock.Acquire(bg(), app, r, dlock.Holder(h), dlock.Lease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b, err := dlock.Acquire(bg(), app, r, dlock.Holder(h), dlock.Lease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(bg())
	n := func() (n int) {
		err := admin.QueryRow(`SELECT coalesce(max(count), 0) FROM dlock.locks `+
			`WHERE resource = $1 AND holder IS NOT NULL`, r).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if c := n(); c != 2 {
		t.Fatalf("count %d after two acquisitions, want 2", c)
	}
	p.holdAfter(h) // in the release's Bind: held once it is executed
	errc := make(chan error, 1)
	go func() { errc <- a.Release(bg()) }()
	until(t, "A's release committed", func() bool { return n() == 1 })
	p.cutAll() // the answer is lost with its connection ...
	p.release()
	p.heal() // ... and a statement sent again would get through
	select {
	case err = <-errc:
	case <-within(t, 30*time.Second).Done():
		t.Fatal("A's Release did not return")
	}
	if err == nil {
		t.Log("A's Release said released")
	}
	time.Sleep(500 * time.Millisecond)
	if c := n(); c != 1 {
		t.Fatalf("count %d after A's release, want 1: B's count was taken", c)
	}
	if ok, err := b.Check(bg()); !ok || err != nil || b.Err() != nil {
		t.Fatalf("B: check %v %v, Err %v", ok, err, b.Err())
	}
}

// A session's close commits, then its connection dies before the answer.
// Sent again, the close found no session and Close returned ErrLost for
// a session it had closed itself.
func TestCloseAnswerLost(t *testing.T) {
	t.Parallel()
	admin := appDB(t, "")
	needSessions(t, admin)
	p := newProxy(t)
	app := open(t, p.dsn(), "")
	s, err := dlock.OpenSession(bg(), app, dlock.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(s.ID(), 10)
	sessions := func() (n int) {
		if err := admin.QueryRow(`SELECT count(*) FROM dlock.sessions WHERE id = $1::text::bigint`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	p.holdAfter(id) // in the close's Bind (keepalives are a minute apart)
	errc := make(chan error, 1)
	go func() { errc <- s.Close(bg()) }()
	until(t, "the close committed", func() bool { return sessions() == 0 })
	p.cutAll()
	p.release()
	p.heal()
	select {
	case err = <-errc:
	case <-within(t, 30*time.Second).Done():
		t.Fatal("Close did not return")
	}
	if errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Close: %v: the close was sent again and found its own session gone", err)
	}
}
