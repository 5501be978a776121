package worker_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// gate is a TCP proxy to the test server that drops every connection while
// closed: a database that is down, as a client sees it.
type gate struct {
	l       net.Listener
	target  string
	open    atomic.Bool
	dropped atomic.Int64 // connections refused while closed
	mu      sync.Mutex
	conns   []net.Conn
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{l: l, target: target}
	t.Cleanup(func() {
		l.Close()
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, c := range g.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !g.open.Load() {
				c.Close()
				g.dropped.Add(1)
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			g.mu.Lock()
			g.conns = append(g.conns, c, up)
			g.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return g
}

// cut closes the gate and drops every connection through it: a database
// that went down under a running worker.
func (g *gate) cut() {
	g.open.Store(false)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

// pool opens a pool on schema through the gate.
func (g *gate) pool(t *testing.T, schema string) *pgxpool.Pool {
	t.Helper()
	cfg := pgtest.Config(t, schema)
	addr := g.l.Addr().(*net.TCPAddr)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = addr.IP.String(), uint16(addr.Port)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	return pgtest.PoolFromConfig(t, cfg)
}

// syncBuffer is a log destination that tests read while the worker writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) count(substr string) int { return strings.Count(s.String(), substr) }

// A worker whose database is down when it starts waits for it, logging the
// outage once however many attempts fail, and runs tasks once it is up.
func TestStartWaitsForDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, err := pgxpool.ParseConfig(pgtest.Server(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(t, net.JoinHostPort(srv.ConnConfig.Host, strconv.Itoa(int(srv.ConnConfig.Port))))
	id := b.enqueue(t, "job", nil)

	logs := &syncBuffer{}
	var ran atomic.Bool
	w := worker.New(g.pool(t, b.schema), testConfig(worker.Config{
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, worker.Handlers{"job": func(context.Context, *worker.Task) error { ran.Store(true); return nil }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v after its context ended", err)
		}
	}()

	// Several attempts fail (the backoff starts at 100ms), and Run is
	// still waiting.
	waitFor(t, 30*time.Second, "several failed attempts", func() bool { return g.dropped.Load() >= 4 })
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while the database was down", err)
	default:
	}
	if n := logs.count("the database is not available"); n != 1 {
		t.Fatalf("the outage was logged %d times, want once:\n%s", n, logs.String())
	}

	g.open.Store(true)
	waitFor(t, 30*time.Second, "the task to complete", func() bool { return b.get(t, id).Status == queue.StatusCompleted })
	if !ran.Load() {
		t.Fatal("the handler did not run")
	}
	if n := logs.count("the database is back"); n != 1 {
		t.Fatalf("the end of the outage was logged %d times, want once:\n%s", n, logs.String())
	}
}

// A worker on a read-only server (a standby, or a primary that a failover
// has not opened for writes yet) waits as for a database that is down, and
// says how to reach the primary.
func TestStartWaitsOnReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := pgtest.Config(t, b.schema)
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	logs := &syncBuffer{}
	w := worker.New(pgtest.PoolFromConfig(t, cfg), testConfig(worker.Config{
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := w.Run(ctx, worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }}); err != nil {
		t.Fatalf("Run = %v, want nil when its context ends while it waits", err)
	}
	if n := logs.count("the database is not available"); n != 1 || !strings.Contains(logs.String(), "target_session_attrs=read-write") {
		t.Fatalf("want one line naming target_session_attrs=read-write, got:\n%s", logs.String())
	}
}

// A connection lost part way through start, after the checks, is an
// outage like any other: Run tries again and runs tasks, rather than
// returning the error (a chaos run's terminated session once ended a worker
// that way).
func TestStartConnectionLostPartWay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueue(t, "job", nil)
	cfg := pgtest.Config(t, b.schema)
	cutter := &connCutter{match: "name: LimitLockClass"}
	cfg.ConnConfig.Tracer = cutter
	w := worker.New(pgtest.PoolFromConfig(t, cfg), testConfig(worker.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})
	}()
	waitFor(t, 5*time.Second, "the task to complete, or Run to return", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run returned %v after losing its connection part way through start", err)
		default:
		}
		return b.get(t, id).Status == queue.StatusCompleted
	})
	if !cutter.cut.Load() {
		t.Fatal("no connection was cut: the test did not test anything")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v after its context ended", err)
	}
}

// connCutter closes the connection of the first query whose SQL contains
// match, as the query starts: the query fails as on a connection that the
// server ended.
type connCutter struct {
	match string
	cut   atomic.Bool
}

func (c *connCutter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, c.match) && c.cut.CompareAndSwap(false, true) {
		conn.PgConn().Close(ctx)
	}
	return ctx
}

func (c *connCutter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Configuration errors end Run at once: waiting cannot fix them (see also
// TestRunErrors).
func TestStartConfigErrors(t *testing.T) {
	t.Parallel()
	ok := worker.Handlers{"x": func(context.Context, *worker.Task) error { return nil }}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("no such database", func(t *testing.T) {
		t.Parallel()
		cfg := pgtest.Config(t, "public")
		cfg.ConnConfig.Database = "skiplock_no_such_database"
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := worker.New(pgtest.PoolFromConfig(t, cfg), worker.Config{Logger: quiet}).Run(ctx, ok)
		if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "skiplock_no_such_database") {
			t.Fatalf("Run = %v, want the server's error at once", err)
		}
	})
}

// A database that goes away under a running worker is logged once per
// component when it goes and once when it is back, however many attempts
// fail in between (the lock session's reconnect loop included: its loss
// is its line).
func TestOutageLoggedOncePerStateChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, err := pgxpool.ParseConfig(pgtest.Server(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(t, net.JoinHostPort(srv.ConnConfig.Host, strconv.Itoa(int(srv.ConnConfig.Port))))
	g.open.Store(true)

	logs := &syncBuffer{}
	w := worker.New(g.pool(t, b.schema), testConfig(worker.Config{
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, worker.Handlers{"job": func(context.Context, *worker.Task) error { return nil }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v after its context ended", err)
		}
	}()
	first := b.enqueue(t, "job", nil)
	waitFor(t, 30*time.Second, "the first task", func() bool { return b.get(t, first).Status == queue.StatusCompleted })

	g.cut()
	// The lock session backs off 100 ms, 200 ms, 400 ms...: well over ten
	// refused connections across the worker's loops.
	waitFor(t, 30*time.Second, "many failed attempts", func() bool { return g.dropped.Load() >= 12 })
	// The lock session's loss is its outage line: its failed reconnects
	// add none (the error does not change).
	if n := logs.count("lock session lost"); n != 1 {
		t.Errorf("the lock session's loss was logged %d times, want once:\n%s", n, logs.String())
	}
	if n := logs.count("lock session reconnecting"); n != 0 {
		t.Errorf("the lock session's reconnects were logged %d times, want none:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "reconnect failed") {
		t.Errorf("a failed reconnect attempt was logged on its own:\n%s", logs.String())
	}
	// Each component says it once; none per attempt.
	seen := map[string]int{}
	for _, line := range strings.Split(logs.String(), "\n") {
		// msg="skiplock: <component>: the database is not available..."
		if i, j := strings.Index(line, "msg="), strings.Index(line, "the database is not available"); i >= 0 && j > i {
			seen[line[i:j]]++
		}
	}
	if len(seen) == 0 {
		t.Errorf("no component logged the outage:\n%s", logs.String())
	}
	for what, n := range seen {
		if n != 1 {
			t.Errorf("%q logged its outage %d times:\n%s", what, n, logs.String())
		}
	}

	g.open.Store(true)
	second := b.enqueue(t, "job", nil)
	waitFor(t, 30*time.Second, "a task after the outage", func() bool { return b.get(t, second).Status == queue.StatusCompleted })
	waitFor(t, 30*time.Second, "the lock session to be back", func() bool { return logs.count("lock session reconnected") >= 1 })
	if n := logs.count("lock session reconnected"); n != 1 {
		t.Errorf("the reconnect was logged %d times, want once:\n%s", n, logs.String())
	}
}

// prepares records the statements prepared on a pool's connections (a
// pgx tracer): the ones sqlc names, by name.
type prepares struct {
	mu    sync.Mutex
	names []string
}

func (p *prepares) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (p *prepares) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (p *prepares) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	if _, rest, ok := strings.Cut(d.SQL, "-- name: "); ok {
		name, _, _ := strings.Cut(rest, " ")
		p.mu.Lock()
		p.names = append(p.names, name)
		p.mu.Unlock()
	}
	return ctx
}

func (p *prepares) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// The statements Run waits for before its first claim are sent unnamed,
// one round trip each: a cached statement's first run on a connection
// takes two (its Parse and Describe, then its execution), and across a
// 2.2 ms round trip those had held the first claim back by about 35 ms.
func TestStartStatementsUnnamed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := pgtest.Config(t, b.schema)
	tr := &prepares{}
	cfg.ConnConfig.Tracer = tr // the lock session and the listener copy it
	pool := pgtest.PoolFromConfig(t, cfg)
	if err := b.client.SetLimit(context.Background(), queue.Limit{Queue: "other", Max: 5}); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, "job", nil)
	ran := make(chan struct{}, 1)
	_, stop := start(t, pool, worker.Config{}, worker.Handlers{"job": func(context.Context, *worker.Task) error {
		ran <- struct{}{}
		return nil
	}})
	select {
	case <-ran:
	case <-time.After(pgtest.Patient(10 * time.Second)):
		t.Fatal("the task did not run")
	}
	stop()
	waited := []string{"SchemaTaskTable", "SchemaVersionSources", "SchemaVersion", "SchemaVersionStamp", "SessionReadOnly",
		"LimitLockClass", "SchemaLockTableSize", "SessionBackendPID", "SessionTune", "WorkerRegister", "LimitsExist"}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, name := range tr.names {
		for _, w := range waited {
			if name == w {
				t.Errorf("%s was prepared (all prepared: %v)", name, tr.names)
			}
		}
	}
}
