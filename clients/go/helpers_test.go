// helpers_test.go: what the tests share: pools on the test server
// (DLOCK_TEST_DSN, a superuser or the portable edition's owner), on
// pgbouncer (DLOCK_TEST_BOUNCER_DSN, transaction pooling), and through a
// TCP proxy the tests can cut, and through a driver wrapper that has the
// server roll acquisitions back (rollbackDB). The driver is the one compiled in
// (-tags dlock_pq, dlock_pgx4, dlock_pgx5); without one every test skips.
// Promises: none

package dlock_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var counter int64

// unique: a resource name of its own for each test.
func unique(what string) string {
	return fmt.Sprintf("go-test:%s:%d:%d", what, os.Getpid(), atomic.AddInt64(&counter, 1))
}

// driverName: the database/sql driver compiled in ("postgres" for
// lib/pq, "pgx" for pgx's stdlib).
func driverName() string {
	for _, d := range sql.Drivers() {
		if d == "pgx" || d == "postgres" {
			return d
		}
	}
	return ""
}

// open: a *sql.DB on DSN with EXTRA ("application_name=x") appended.
func open(t *testing.T, dsn, extra string) *sql.DB {
	t.Helper()
	d := driverName()
	if d == "" {
		t.Skip("no driver compiled in (go test -tags dlock_pq, dlock_pgx4 or dlock_pgx5)")
	}
	if dsn == "" {
		t.Skip("DLOCK_TEST_DSN is not set")
	}
	if extra != "" {
		dsn += " " + extra
	}
	db, err := sql.Open(d, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// appDB: a pool of the tests' server; adminDB: another, for looking and
// breaking.
func appDB(t *testing.T, extra string) *sql.DB {
	db := open(t, os.Getenv("DLOCK_TEST_DSN"), extra)
	db.SetMaxOpenConns(4)
	return db
}

func bouncerDB(t *testing.T) *sql.DB {
	dsn := os.Getenv("DLOCK_TEST_BOUNCER_DSN")
	if dsn == "" {
		t.Skip("DLOCK_TEST_BOUNCER_DSN is not set (pgbouncer not installed)")
	}
	return open(t, dsn, "")
}

func bg() context.Context { return context.Background() }

// within: a context bounding a wait that must end (never a speed check).
func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(bg(), d)
	t.Cleanup(cancel)
	return ctx
}

// rollbacks: a pool's next N acquisition or campaign statements that
// name TAG (a parameter) are rolled back by the server with 40001, as a
// serializable caller's conflict with another is: a statement raising it
// is sent in their place (rollbackDB).
type rollbacks struct {
	mu    sync.Mutex
	tag   string
	n     int
	raise string
	sent  int      // how many were rolled back so
	waits []string // the wait ($4) of each acquisition naming TAG, as sent ("NULL" for none)
}

// acquiring: what an acquisition or campaign statement calls.
var acquiring = []string{"dlock.lock(", "dlock.acquire(", "dlock.lock_all(", "dlock.campaign("}

// serializationFailure: a statement the server rolls back with 40001.
const serializationFailure = `DO $$BEGIN RAISE EXCEPTION 'conflict (test)' USING ERRCODE = 'serialization_failure'; END$$`

// arm: the next N acquisitions naming TAG rolled back (after SLEEP on
// the server, if not 0); the counts start again.
func (rb *rollbacks) arm(tag string, n int, sleep time.Duration) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	rb.tag, rb.n, rb.sent, rb.waits = tag, n, 0, nil
	rb.raise = serializationFailure
	if sleep > 0 {
		rb.raise = fmt.Sprintf(`DO $$BEGIN PERFORM pg_catalog.pg_sleep(%g); RAISE EXCEPTION 'conflict (test)' USING ERRCODE = 'serialization_failure'; END$$`,
			sleep.Seconds())
	}
}

// counts: how many were rolled back, and the waits sent.
func (rb *rollbacks) counts() (int, []string) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return rb.sent, append([]string(nil), rb.waits...)
}

// instead: the statement to send for QUERY with ARGS (and its args).
func (rb *rollbacks) instead(query string, args []driver.NamedValue) (string, []driver.NamedValue) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.tag == "" || len(args) < 4 {
		return query, args
	}
	acq, named := false, false
	for _, k := range acquiring {
		acq = acq || strings.Contains(query, k)
	}
	for _, a := range args {
		// TAG itself, or an element of an array (AcquireAll's).
		if v, ok := a.Value.(string); ok && (v == rb.tag || strings.Contains(v, `"`+rb.tag+`"`)) {
			named = true
		}
	}
	if !acq || !named {
		return query, args
	}
	w := "NULL"
	if v, ok := args[3].Value.(string); ok {
		w = v
	}
	rb.waits = append(rb.waits, w)
	if rb.n == 0 {
		return query, args
	}
	rb.n--
	rb.sent++
	return rb.raise, nil
}

// rollbackDB: a pool of the tests' server (as appDB) through the driver
// compiled in, wrapped so that RB decides what each statement sends.
func rollbackDB(t *testing.T) (*sql.DB, *rollbacks) {
	dsn := os.Getenv("DLOCK_TEST_DSN")
	d := open(t, dsn, "").Driver()
	rb := &rollbacks{}
	db := sql.OpenDB(rbConnector{d: d, dsn: dsn, rb: rb})
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	return db, rb
}

type rbConnector struct {
	d   driver.Driver
	dsn string
	rb  *rollbacks
}

func (c rbConnector) Connect(ctx context.Context) (driver.Conn, error) {
	var conn driver.Conn
	var err error
	if dc, ok := c.d.(driver.DriverContext); ok {
		var cn driver.Connector
		if cn, err = dc.OpenConnector(c.dsn); err != nil {
			return nil, err
		}
		conn, err = cn.Connect(ctx)
	} else {
		conn, err = c.d.Open(c.dsn)
	}
	if err != nil {
		return nil, err
	}
	return &rbConn{Conn: conn, rb: c.rb}, nil
}

func (c rbConnector) Driver() driver.Driver { return c.d }

// rbConn: a driver's connection whose queries go through rollbacks (the
// drivers' other optional interfaces passed on).
type rbConn struct {
	driver.Conn
	rb *rollbacks
}

func (c *rbConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, fmt.Errorf("rollbackDB: the driver's connection has no QueryContext")
	}
	query, args = c.rb.instead(query, args)
	return q.QueryContext(ctx, query, args)
}

func (c *rbConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := c.Conn.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (c *rbConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return c.Conn.Begin() //lint:ignore SA1019 a driver without BeginTx
}

func (c *rbConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *rbConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *rbConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// row: the holding of RESOURCE (holder, fence, live), ok false if none.
type holding struct {
	holder string
	fence  int64
	live   bool
	exists bool
}

func row(t *testing.T, admin *sql.DB, resource string) holding {
	t.Helper()
	var h holding
	err := admin.QueryRow(`SELECT holder, fence, expires_at > clock_timestamp() FROM dlock.locks `+
		`WHERE resource = $1 ORDER BY fence DESC LIMIT 1`, resource).Scan(&h.holder, &h.fence, &h.live)
	if err == sql.ErrNoRows {
		return h
	}
	if err != nil {
		t.Fatalf("reading %s: %v", resource, err)
	}
	h.exists = true
	return h
}

// leaseExpiry: the expiry on the server of RESOURCE's newest holding
// (the zero time if none).
func leaseExpiry(t *testing.T, admin *sql.DB, resource string) (at time.Time) {
	t.Helper()
	err := admin.QueryRow(`SELECT expires_at FROM dlock.locks WHERE resource = $1 `+
		`ORDER BY fence DESC LIMIT 1`, resource).Scan(&at)
	if err != nil && err != sql.ErrNoRows {
		t.Fatalf("reading %s: %v", resource, err)
	}
	return at
}

// restartWithin: stop the server (fast) now, start it again once the
// renewal due at DUE has failed, then wait until the server shows one
// that landed after the stop (EXPIRY: the holding's expiry there, past
// the stop plus LEASE) and the last one before the stop has run out.
// The outage is measured, not slept: a slow stop or start under load
// shortens the margin, never fakes a loss. Skips without pg_ctl.
func restartWithin(t *testing.T, lease time.Duration, due time.Time, expiry func() time.Time) {
	t.Helper()
	pgCtl, data := os.Getenv("DLOCK_TEST_PG_CTL"), os.Getenv("DLOCK_TEST_PG_DATA")
	// -t 300: a loaded machine once took longer than pg_ctl's 60 s.
	ctl := func(args ...string) error {
		cmd := exec.Command(pgCtl, append([]string{"-D", data, "-w", "-t", "300"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("pg_ctl %v: %v\n%s", args, err, out)
		}
		return nil
	}
	start := func() error { return ctl("-l", os.Getenv("DLOCK_TEST_PG_LOG"), "start") }
	// Whatever fails below, the server is up for the tests that follow
	// (pg_ctl status exits 3 when no server runs).
	t.Cleanup(func() {
		if exec.Command(pgCtl, "-D", data, "status").Run() != nil {
			if err := start(); err != nil {
				t.Errorf("starting the server again: %v", err)
			}
		}
	})
	stopped := time.Now()
	if err := ctl("-m", "fast", "stop"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(due.Add(time.Second)))
	if err := start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("server down for %v (the lease: %v)", time.Since(stopped).Round(time.Millisecond), lease)
	for end := time.Now().Add(lease); !expiry().After(stopped.Add(lease)); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no renewal landed on the server after the restart")
		}
	}
	time.Sleep(time.Until(stopped.Add(lease + 500*time.Millisecond)))
}

// needPgCtl: skip unless the tests may stop and start the server.
func needPgCtl(t *testing.T) {
	t.Helper()
	if os.Getenv("DLOCK_TEST_PG_CTL") == "" || os.Getenv("DLOCK_TEST_PG_DATA") == "" {
		t.Skip("DLOCK_TEST_PG_CTL and DLOCK_TEST_PG_DATA (pg_ctl and the server's data directory) are not set")
	}
}

// lostInTime: wait (up to BOUND) until every one of DONES is closed,
// reading meanwhile the holding's expiry on the server (EXPIRY, the zero
// time if none); fail unless each closed before the last expiry read.
// Each loss is timed as it happens, not by a query after it: on a loaded
// machine such a query, after a loss signalled in time, once answered
// after the expiry (CI, stop 51).
func lostInTime(t *testing.T, bound time.Duration, expiry func() time.Time, dones ...<-chan struct{}) {
	t.Helper()
	at := make([]time.Time, len(dones))
	all := make(chan struct{})
	go func() {
		for i, d := range dones {
			<-d
			if at[i].IsZero() {
				at[i] = time.Now()
			}
			for j := i + 1; j < len(dones); j++ { // those already closed: now too
				select {
				case <-dones[j]:
					at[j] = time.Now()
				default:
				}
			}
		}
		close(all)
	}()
	var last time.Time
	end := time.After(bound)
	for {
		if e := expiry(); e.After(last) {
			last = e
		}
		select {
		case <-all:
			for i, a := range at {
				if !a.Before(last) {
					t.Fatalf("loss %d signalled at %v, after the server's expiry %v", i, a, last)
				}
			}
			return
		case <-end:
			t.Fatalf("not every loss signalled within %v", bound)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// closed: whether CH is closed by the time CTX ends.
func closed(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// proxy: a TCP proxy to the server (DLOCK_TEST_PROXY_TARGET, host:port).
// cut closes every connection and black-holes new ones, as a partition
// would; heal lets them through again.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
	held  chan struct{} // non-nil: the server's answers wait until it is closed
	on    string        // "": held on every connection, else on those that sent it (holdOn)
	after string        // non-empty: nothing held until a client sent it (holdAfter)
	links []*link
	seen  map[string]int // how often each of the counted strings was sent
	done  map[string]int // ... and answered (a ReadyForQuery came back after it)
}

// link: one client's connection through the proxy; marked once it sent
// the string of holdOn; pending: the counted strings it sent that no
// ReadyForQuery has answered yet; ready once a ReadyForQuery came (its
// startup is over: its application_name is seen); gone once closed.
type link struct {
	marked, ready, gone bool
	pending             map[string]int
}

// counted: the strings the proxy counts in what clients send.
var counted = []string{"dlock.renew(", "dlock.keepalive(", "dlock.unlock(", "dlock.resign("}

// sentCount: how often NEEDLE (one of counted) was sent to the server.
func (p *proxy) sentCount(needle string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[needle]
}

// answeredCount: how often NEEDLE (one of counted) was sent and the
// server's ReadyForQuery after it passed the proxy: its statement has run.
func (p *proxy) answeredCount(needle string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done[needle]
}

// started: whether every connection through P has ended its startup (or
// is gone).
func (p *proxy) started() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		if !l.ready && !l.gone {
			return false
		}
	}
	return true
}

// countingReader: a client's side, counting the strings of counted (a
// string split between two reads is counted too).
type countingReader struct {
	p    *proxy
	l    *link
	r    io.Reader
	tail []byte
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if n > 0 {
		buf := append(c.tail, b[:n]...)
		c.p.mu.Lock()
		for _, s := range counted {
			k := strings.Count(string(buf), s) - strings.Count(string(c.tail), s)
			c.p.seen[s] += k
			c.l.pending[s] += k
		}
		if c.p.on != "" && strings.Contains(string(buf), c.p.on) {
			c.l.marked = true
		}
		if c.p.after != "" && strings.Contains(string(buf), c.p.after) {
			c.p.after = ""
		}
		c.p.mu.Unlock()
		if len(buf) > 64 {
			buf = buf[len(buf)-64:]
		}
		c.tail = append([]byte(nil), buf...)
	}
	return n, err
}

func newProxy(t *testing.T) *proxy {
	target := os.Getenv("DLOCK_TEST_PROXY_TARGET")
	if target == "" {
		t.Skip("DLOCK_TEST_PROXY_TARGET (the server's host:port) is not set")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, seen: map[string]int{}, done: map[string]int{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			cut := p.cut
			p.mu.Unlock()
			if cut {
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.cut { // cut while it dialled: it must not get through
				p.mu.Unlock()
				s.Close()
				c.Close()
				continue
			}
			p.conns = append(p.conns, s)
			l := &link{pending: map[string]int{}}
			p.links = append(p.links, l)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, &countingReader{p: p, l: l, r: c}); s.Close() }()
			go func() {
				_, _ = io.Copy(c, &holdingReader{p: p, l: l, r: s})
				c.Close()
				p.mu.Lock()
				l.gone = true
				p.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.release(); p.cutAll() })
	return p
}

// dsn: the test DSN through the proxy.
func (p *proxy) dsn() string {
	host, port, _ := net.SplitHostPort(p.ln.Addr().String())
	return os.Getenv("DLOCK_TEST_DSN") + " host=" + host + " port=" + port
}

func (p *proxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// blockNew: new connections black-holed, the open ones left alone.
func (p *proxy) blockNew() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

// hold: the server's answers held back (the statements still get
// through); release lets them go.
func (p *proxy) hold() { p.holdOn("") }

// holdOn: the server's answers held back on the connections whose client
// sends MARK (a parameter's text, say) from now on ("": on every one).
func (p *proxy) holdOn(mark string) {
	p.mu.Lock()
	p.held, p.on = make(chan struct{}), mark
	p.mu.Unlock()
}

// holdAfter: every connection's answers held back once a client sent
// MARK (the answers to what went before, as a driver's ping while it
// hands out a pooled connection, get through).
func (p *proxy) holdAfter(mark string) {
	p.mu.Lock()
	p.held, p.on, p.after = make(chan struct{}), "", mark
	p.mu.Unlock()
}

func (p *proxy) release() {
	p.mu.Lock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.on, p.after = "", ""
	for _, l := range p.links {
		l.marked = false
	}
	p.mu.Unlock()
}

// holdingReader: the server's side, read on while the proxy holds nothing
// on its connection; a ReadyForQuery let through answers what its link
// sent before (answeredCount).
type holdingReader struct {
	p    *proxy
	l    *link
	r    io.Reader
	tail []byte
}

// readyForQuery: a ReadyForQuery message's type and length.
const readyForQuery = "Z\x00\x00\x00\x05"

func (h *holdingReader) Read(b []byte) (int, error) {
	n, err := h.r.Read(b)
	h.p.mu.Lock()
	held := h.p.held
	if (h.p.on != "" && !h.l.marked) || h.p.after != "" {
		held = nil
	}
	h.p.mu.Unlock()
	if held != nil {
		<-held
	}
	if n > 0 {
		buf := append(h.tail, b[:n]...)
		if strings.Contains(string(buf), readyForQuery) && !strings.Contains(string(h.tail), readyForQuery) {
			h.p.mu.Lock()
			h.l.ready = true
			for s, k := range h.l.pending {
				h.p.done[s] += k
			}
			h.l.pending = map[string]int{}
			h.p.mu.Unlock()
		}
		if len(buf) > len(readyForQuery)-1 {
			buf = buf[len(buf)-(len(readyForQuery)-1):]
		}
		h.tail = append([]byte(nil), buf...)
	}
	return n, err
}

func (p *proxy) heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// portable: whether the tests run on the portable edition.
func portable() bool { return strings.EqualFold(os.Getenv("DLOCK_TEST_EDITION"), "portable") }
