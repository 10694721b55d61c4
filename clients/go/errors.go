package dlock

// errors.go - dlock's errors: *Error carries a SQLSTATE; the sentinels
// ErrNotAcquired, ErrLost and ErrReleased say what happened (errors.Is).

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrNotAcquired: the wait ended before the lock was granted
	// (SQLSTATE 55P03, as PostgreSQL's own NOWAIT and lock_timeout).
	ErrNotAcquired = errors.New("dlock: not acquired within the wait")
	// ErrLost: the lease was lost (broken by an administrator, or
	// renewals failed until just before the lease's end).
	ErrLost = errors.New("dlock: lease lost")
	// ErrReleased: the lock was released by its owner (Lock.Err after
	// Release, as context.Canceled after a cancel).
	ErrReleased = errors.New("dlock: released")
	// ErrClosed: the session was closed by its owner (Session.Err after
	// Close).
	ErrClosed = errors.New("dlock: session closed")
)

// Error is every error this package returns that has a SQLSTATE, and
// every loss. Code is the SQLSTATE ("55P03", "22023", the server's own);
// it is empty for a loss that no server error caused. Err is the cause:
// the driver's error (errors.As finds *pq.Error or *pgconn.PgError
// through it), or one of the sentinels.
type Error struct {
	Code    string
	Message string
	Err     error
	// deadline: the context's deadline ended the wait (errors.Is finds
	// context.DeadlineExceeded as well as ErrNotAcquired).
	deadline bool
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Code != "" {
		return fmt.Sprintf("%s (SQLSTATE %s)", msg, e.Code)
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is: an acquisition that the context's deadline ended is also
// context.DeadlineExceeded.
func (e *Error) Is(target error) bool { return e.deadline && target == context.DeadlineExceeded }

// SQLState returns Code, as the drivers' errors do.
func (e *Error) SQLState() string { return e.Code }

// sqlStater: lib/pq's *pq.Error and pgx's *pgconn.PgError.
type sqlStater interface{ SQLState() string }

// sqlState: the SQLSTATE of ERR's chain, or "".
func sqlState(err error) string {
	var s sqlStater
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// wrap: ERR as an *Error with its SQLSTATE (nil stays nil; an *Error
// stays as it is).
func wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Code: sqlState(err), Message: "dlock: " + what + ": " + err.Error(), Err: err}
}

// invalid: a bad argument, refused before anything is sent (22023, as
// the server refuses its own).
func invalid(format string, args ...interface{}) error {
	return &Error{Code: "22023", Message: "dlock: " + fmt.Sprintf(format, args...)}
}

// acquireTries: how many times an acquisition or a campaign is sent in
// all while the server rolls it back and asks for a retry (retryable):
// nothing was granted (acquire.go, grantTries).
const acquireTries = 10

// retryable: whether ERR is a rollback the server asks to retry: a
// serialization failure (40001: REPEATABLE READ or SERIALIZABLE, a row
// changed since the snapshot, as a renewal does) or a deadlock (40P01).
func retryable(err error) bool {
	c := sqlState(err)
	return c == "40001" || c == "40P01"
}

// serverError: whether ERR is a statement the server refused (the
// connection is then still usable), not a lost connection or a timeout.
func serverError(err error) bool {
	c := sqlState(err)
	return c != "" && c[:2] != "08" && c[:2] != "57"
}
