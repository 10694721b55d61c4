// export_test.go: names the tests (package dlock_test) read from the package.
// Promises: none
package dlock

import "time"

// AcquireTries: how many times an acquisition rolled back by the server is
// sent in all (acquireTries).
const AcquireTries = acquireTries

// PastDeadline: as if the process had been paused past L's renewal
// deadline, its loop's timer not fired yet.
func PastDeadline(l *Lock) { l.due.set(time.Now().Add(-time.Millisecond)) }

// SessionPastDeadline: the same for S's keepalive deadline.
func SessionPastDeadline(s *Session) { s.due.set(time.Now().Add(-time.Millisecond)) }

// Margin, TryBound, RetryCap: the renewal loop's budget (renew.go).
var (
	Margin   = margin
	TryBound = tryBound
	RetryCap = retryCap
)
