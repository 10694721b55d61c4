// Package dlock is a client of dlock, leased locks with fencing tokens
// inside PostgreSQL (the C extension, or its portable edition), on
// database/sql: it works with pgx's stdlib driver and with lib/pq, and
// imports neither.
//
//	lock, err := dlock.Acquire(ctx, db, "nightly-report", dlock.Lease(30*time.Second))
//	if err != nil { ... }
//	defer lock.Release(context.Background())
//	// lock.Fence(); stop the work when <-lock.Done() (then lock.Err() says why)
//
// The lease is renewed every third of itself on a goroutine of its own,
// each renewal on a connection taken from the pool for that statement
// (holder-based: it works behind pgbouncer in transaction pooling).
// Failed renewals are retried within the lease; when the lock is lost,
// Done is closed before the lease's end, never after. Errors with a
// SQLSTATE are *Error (Code), wrapping the driver's error. Nothing is
// printed.
//
// Sessions (dlock 1.1): OpenSession gives a *Session whose locks have no
// lease of their own; one keepalive goroutine keeps them all, and the
// session's loss closes every one of their Done channels before its ttl
// ends.
package dlock
