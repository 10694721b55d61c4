package dlock

// db.go - one statement on a connection of its own from the caller's
// *sql.DB, parameters as text (the same with every driver), and the
// helpers for them: holders, intervals, array literals.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Execer runs a statement: *sql.Tx, *sql.Conn or *sql.DB
// (AssertFence's transaction).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...interface{}) (sql.Result, error)
}

// uniqueHolder: the default holder, unique to one lock object.
func uniqueHolder() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand does not fail on Linux; a clock-based fallback.
		return fmt.Sprintf("%s:%d:%d", hostname(), os.Getpid(), time.Now().UnixNano())
	}
	return fmt.Sprintf("%s:%d:%s", hostname(), os.Getpid(), hex.EncodeToString(b))
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "go"
	}
	return h
}

// interval: D as interval text ("1500000 microseconds"): the interval's
// own precision, so that the server's lease is the one counted here.
func interval(d time.Duration) string {
	return strconv.FormatInt(d.Microseconds(), 10) + " microseconds"
}

// nullable: V, or NULL when !OK.
func nullable(v string, ok bool) interface{} {
	if !ok {
		return nil
	}
	return v
}

// textArray: a PostgreSQL array literal of VS (a parameter value, cast
// to text[] by the statement: nothing is spliced into SQL).
func textArray(vs []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range vs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, c := range v {
			if c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(c)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// intArray: "{1,2,3}".
func intArray(vs []int64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.FormatInt(v, 10)
	}
	return "{" + strings.Join(s, ",") + "}"
}

// parseFences: an acquisition's result as text (one fence, or a
// comma-separated list); nil for NULL.
func parseFences(v sql.NullString) ([]int64, error) {
	if !v.Valid {
		return nil, nil
	}
	parts := strings.Split(strings.Trim(v.String, "{}"), ",")
	out := make([]int64, len(parts))
	for i, p := range parts {
		f, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil {
			return nil, &Error{Message: "dlock: unexpected fence " + strconv.Quote(v.String), Err: err}
		}
		out[i] = f
	}
	return out, nil
}

// redo: how onConn meets a connection of the pool that may be dead (an
// idle one the server, a failover, idle_session_timeout or a proxy
// closed: the statement then meets a reset, an end of file, or the FATAL
// left for it).
type redo int

const (
	// probed: a statement that must not run twice (an acquisition, a
	// release): each connection is pinged first, and a dead one skipped;
	// once sent, never again (an error after it may follow its commit:
	// lib/pq says ErrBadConn for any FATAL or end of file).
	probed redo = iota
	// again: one that may (a renewal, a keepalive, a read): after any
	// failure of the connection it runs again on another, at once.
	again
)

// queryRow: run SQL with ARGS on a connection of its own from DB (as MODE
// says, onConn), bounded by CTX, scanning its one row into DEST. Returns
// when the statement was sent (after getting the connection). It returns
// at CTX's end even when the driver does not (lib/pq ignores it while
// connecting): the statement then goes on by itself and its result is
// dropped, so the caller must not read DEST after an error.
func queryRow(ctx context.Context, db *sql.DB, mode redo, query string, args []interface{}, dest ...interface{}) (time.Time, error) {
	type result struct {
		sent time.Time
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		var sent time.Time
		err := onConn(ctx, db, mode, func(conn *sql.Conn) error {
			sent = time.Now()
			return conn.QueryRowContext(ctx, query, args...).Scan(dest...)
		})
		ch <- result{sent, err}
	}()
	select {
	case r := <-ch:
		return r.sent, r.err
	case <-ctx.Done():
		select {
		case r := <-ch:
			return r.sent, r.err
		default:
			return time.Time{}, ctx.Err()
		}
	}
}

// onConn runs RUN on a connection of DB's own; on another while the one
// it got was dead (MODE), at most once per idle connection and twice
// more: a pool of dead idle connections costs no renewal its back-off,
// and fails no acquisition. A connection whose statement did not end
// with a server's answer is not given back to the pool. Nothing runs once
// CTX has ended (lib/pq connects past it).
func onConn(ctx context.Context, db *sql.DB, mode redo, run func(*sql.Conn) error) error {
	tries := db.Stats().Idle + 2
	for {
		tries--
		conn, err := db.Conn(ctx)
		if err == nil && ctx.Err() != nil {
			conn.Close()
			err = ctx.Err()
		}
		if err != nil {
			return err
		}
		if mode == probed {
			// The probe is an empty statement, not the driver's Ping: lib/pq
			// and pgx turn every error of a ping into ErrBadConn, a server's
			// answer too (the caller's statement_timeout, 57014), which then
			// came out without its SQLSTATE.
			if _, err := conn.ExecContext(ctx, ";"); err != nil {
				c := sqlState(err)
				answered := c != "" && c[:2] != "08" && !strings.HasPrefix(c, "57P")
				if !answered {
					_ = conn.Raw(func(interface{}) error { return errBadConn })
				}
				conn.Close()
				if ctx.Err() != nil {
					return ctx.Err() // (lib/pq says ErrBadConn for a cancelled statement)
				}
				if answered || tries <= 0 {
					return err
				}
				continue
			}
			if ctx.Err() != nil {
				// lib/pq closed it as the context ended, ping answered or not.
				_ = conn.Raw(func(interface{}) error { return errBadConn })
				conn.Close()
				return ctx.Err()
			}
		}
		err = run(conn)
		// No row (a read of nothing) is an answer; so is a server's error
		// that leaves the connection usable.
		bad := err != nil && !errors.Is(err, sql.ErrNoRows) && !serverError(err)
		if bad {
			// Mark it bad: a raw close, so the pool opens a new one.
			_ = conn.Raw(func(interface{}) error { return errBadConn })
		}
		conn.Close()
		// Sent again: only a statement that may run twice, after the
		// connection failed (no SQLSTATE, 08, or a backend's FATAL 57P0x;
		// not the caller's statement_timeout, 57014, an answer).
		c := sqlState(err)
		resend := mode == again && bad && (c == "" || c[:2] == "08" || strings.HasPrefix(c, "57P"))
		if !resend || tries <= 0 || ctx.Err() != nil {
			return err
		}
	}
}

var errBadConn = driver.ErrBadConn
