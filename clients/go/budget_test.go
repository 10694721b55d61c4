// budget_test.go: the renewal's retry budget (tryBound, retryCap), no
// server: a try that stalls is given up at its bound and leaves the next
// try, on a new connection, at least a sixth of the lease before the
// renewal deadline. A third of the lease per try left 0.1 s of a 1.5 s
// lease after the back-off: on a loaded machine it came too late (CI).
// Promises: P16
package dlock_test

import (
	"testing"
	"time"

	dlock "github.com/dlock-pg/dlock-go"
)

func TestRetryBudget(t *testing.T) {
	for _, lease := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second,
		30 * time.Second, time.Hour} {
		sent := time.Unix(1000, 0)
		deadline := sent.Add(lease - dlock.Margin(lease))
		due := sent.Add(lease / 3)
		bound := dlock.TryBound(lease, due, deadline)
		if bound.Sub(due) < lease/6 || bound.After(deadline) {
			t.Fatalf("lease %v: first try bounded at %v after it began (deadline %v after)", lease, bound.Sub(due), deadline.Sub(due))
		}
		// Stalled to its bound, the next try begins at once (the back-off
		// counts from the try's start and is at most a tenth of the lease).
		if c := dlock.RetryCap(lease); c > lease/10 || c > time.Second || c <= 0 {
			t.Fatalf("lease %v: back-off cap %v", lease, c)
		}
		next := dlock.TryBound(lease, bound, deadline)
		if next.Sub(bound) < lease/6 || next.After(deadline) {
			t.Fatalf("lease %v: after a stalled try the next has %v (deadline %v)", lease, next.Sub(bound), deadline.Sub(bound))
		}
	}
}
