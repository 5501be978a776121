package upgrade

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// previousRelease is the earlier commit whose workers TestRollingUpgrade
// runs through the current migrations: the last commit of the main line
// before migration 18 was added, so its schema is version 15 and the
// current tree has six migrations more (16 to 21 when it was chosen), among
// them new tables, new columns on skiplock_tasks, a new trigger and a
// CHECK constraint on run_at. Its public API (queue.Client.Enqueue,
// worker.New, Worker.Run) is the one rollingMain uses.
const previousRelease = "17903a16da7b663b02ac1c96ff870a934eb91355"

// previousVersion is previousRelease's schema version.
const previousVersion = 15

// rollingMain is the program built from previousRelease: -migrate applies
// that release's migrations; otherwise it runs a worker whose handler
// records each run in upgrade_runs, and a producer that enqueues one task
// at a time and prints "enqueued ID" once Enqueue has returned. SIGTERM
// stops the producer, then the worker gracefully, and exits 0.
const rollingMain = `package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

type payload struct {
	ID string ` + "`json:\"id\"`" + `
}

func main() {
	migrate := flag.Bool("migrate", false, "apply this build's migrations and exit")
	id := flag.String("id", "", "worker ID, and the prefix of the payload IDs it produces")
	every := flag.Duration("every", 20*time.Millisecond, "pause between two enqueues")
	flag.Parse()
	if err := run(*migrate, *id, *every); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(migrate bool, id string, every time.Duration) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	if migrate {
		return migrations.Up(ctx, pool)
	}
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()

	client := queue.New(pool)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 1; sigCtx.Err() == nil; n++ {
			p := payload{ID: fmt.Sprintf("%s/%d", id, n)}
			// Not sigCtx: an enqueue under way when SIGTERM comes finishes
			// and is reported.
			if _, err := client.Enqueue(ctx, "upgrade", p); err != nil {
				fmt.Fprintln(os.Stderr, "error: enqueue:", err)
				return
			}
			fmt.Println("enqueued", p.ID)
			select {
			case <-time.After(every):
			case <-sigCtx.Done():
			}
		}
	}()

	w := worker.New(pool, worker.Config{
		WorkerID:     id,
		Concurrency:  8,
		PollInterval: 200 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	err = w.Run(sigCtx, worker.Handlers{"upgrade": func(ctx context.Context, t *worker.Task) error {
		var p payload
		if err := t.Decode(&p); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, "INSERT INTO upgrade_runs (payload_id, worker_id, task_id) VALUES ($1, $2, $3)", p.ID, id, t.ID)
		return err
	}})
	wg.Wait()
	return err
}
`

// createRuns is the table every handler writes a row to per run.
const createRuns = `CREATE TABLE upgrade_runs (
	payload_id text NOT NULL,
	worker_id  text NOT NULL,
	task_id    bigint NOT NULL,
	at         timestamptz NOT NULL DEFAULT clock_timestamp()
)`

// TestRollingUpgrade is a rolling upgrade from previousRelease to this
// tree, as docs/OPERATIONS.md describes it: workers and producers of the
// previous release keep running while the current migrations are applied
// under them, current workers join, and the old processes stop on SIGTERM.
// Every task a producer was told was enqueued runs and completes exactly
// once, the old processes log no error, and they go on enqueuing and
// completing tasks after the migrations.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := openRepo(t)

	// The previous release, built with rollingMain.
	src := r.extract(t, previousRelease)
	mainDir := filepath.Join(src, "cmd", "upgrade-rolling")
	if err := os.MkdirAll(mainDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mainDir, "main.go"), []byte(rollingMain), 0o644); err != nil {
		t.Fatal(err)
	}
	oldBin := filepath.Join(t.TempDir(), "upgrade-rolling")
	runGo(t, src, nil, "build", "-o", oldBin, "./cmd/upgrade-rolling")

	schema := pgtest.Schema(t, false)
	pool := pgtest.NewPool(t, schema)
	if _, err := pool.Exec(ctx, createRuns); err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.SchemaURL(t, schema)

	// The previous release's schema, applied by that release.
	if out, err := oldCommand(oldBin, dbURL, "-migrate").CombinedOutput(); err != nil {
		t.Fatalf("migrating with %s: %v\n%s", previousRelease[:12], err, out)
	}
	if v := schemaVersion(t, pool); v != previousVersion {
		t.Fatalf("the previous release migrated the schema to version %d, want %d", v, previousVersion)
	}

	// Two old processes, each a worker and a producer.
	old := []*oldProc{startOld(t, oldBin, dbURL, "old-1"), startOld(t, oldBin, dbURL, "old-2")}
	defer func() {
		for _, p := range old {
			p.kill()
		}
	}()
	checkOld := func() {
		for _, p := range old {
			p.checkRunning(t)
		}
	}
	pgtest.Eventually(t, 5*time.Second, "each old worker completing tasks", func() bool {
		checkOld()
		return completedBy(t, pool, "old-1", time.Time{}) > 0 && completedBy(t, pool, "old-2", time.Time{}) > 0
	})

	// The current migrations, applied while they run.
	began := time.Now()
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("applying the current migrations under running old workers: %v", err)
	}
	var migrated time.Time
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&migrated); err != nil {
		t.Fatal(err)
	}
	t.Logf("migrations %d to %d applied in %s with the old workers running",
		previousVersion+1, migrations.Latest, time.Since(began).Round(time.Millisecond))
	if v := schemaVersion(t, pool); v != int(migrations.Latest) {
		t.Fatalf("schema version %d after migrations.Up, want %d", v, migrations.Latest)
	}

	// The old processes keep working on the new schema: each completes
	// tasks, and enqueues some, after the migrations finished.
	pgtest.Eventually(t, 5*time.Second, "each old worker completing tasks after the migrations", func() bool {
		checkOld()
		return completedBy(t, pool, "old-1", migrated) >= 20 && completedBy(t, pool, "old-2", migrated) >= 20
	})
	pgtest.Eventually(t, 5*time.Second, "the old producers enqueuing after the migrations", func() bool {
		checkOld()
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks
			WHERE created_at > $1 AND payload->>'id' LIKE 'old-%'`, migrated).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n >= 20
	})

	// Current workers join, with a current producer.
	newIDs := []string{"new-1", "new-2"}
	var newWorkers []*worker.Worker
	runErrs := make(chan error, len(newIDs))
	for _, id := range newIDs {
		w := worker.New(pgtest.NewPool(t, schema), worker.Config{
			WorkerID:     id,
			Concurrency:  8,
			PollInterval: 200 * time.Millisecond,
			Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		newWorkers = append(newWorkers, w)
		go func() { runErrs <- w.Run(ctx, runsHandler(pool, id)) }()
	}
	client := queue.New(pool)
	var newEnqueued []string
	for n := 1; n <= 200; n++ {
		id := fmt.Sprintf("new/%d", n)
		if _, err := client.Enqueue(ctx, "upgrade", map[string]string{"id": id}); err != nil {
			t.Fatalf("current producer: %v", err)
		}
		newEnqueued = append(newEnqueued, id)
	}
	pgtest.Eventually(t, 5*time.Second, "the current workers completing tasks", func() bool {
		checkOld()
		return completedBy(t, pool, "new-1", time.Time{})+completedBy(t, pool, "new-2", time.Time{}) >= 20
	})

	// The old processes stop gracefully; the current workers finish what
	// is left.
	for _, p := range old {
		p.terminate(t)
	}
	pgtest.Eventually(t, 10*time.Second, "every task finished", func() bool {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE status NOT IN ('completed', 'failed', 'cancelled')").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	for _, w := range newWorkers {
		stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := w.Stop(stopCtx); err != nil {
			t.Errorf("stopping a current worker: %v", err)
		}
		cancel()
	}
	for range newWorkers {
		if err := <-runErrs; err != nil {
			t.Errorf("a current worker's Run: %v", err)
		}
	}

	// Nothing lost, nothing run twice.
	enqueued := append([]string(nil), newEnqueued...)
	for _, p := range old {
		enqueued = append(enqueued, p.enqueued()...)
	}
	type outcome struct {
		tasks, completed, runs int
	}
	outcomes := map[string]*outcome{}
	rows, err := pool.Query(ctx, `SELECT payload->>'id', count(*), count(*) FILTER (WHERE status = 'completed')
		FROM skiplock_tasks GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		o := &outcome{}
		if err := rows.Scan(&id, &o.tasks, &o.completed); err != nil {
			t.Fatal(err)
		}
		outcomes[id] = o
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = pool.Query(ctx, "SELECT payload_id, count(*) FROM upgrade_runs GROUP BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		if outcomes[id] == nil {
			t.Errorf("payload %s ran %d times but is not in skiplock_tasks", id, n)
			continue
		}
		outcomes[id].runs = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, id := range enqueued {
		o := outcomes[id]
		switch {
		case o == nil:
			t.Errorf("payload %s was enqueued (Enqueue returned) but is not in skiplock_tasks", id)
		case o.tasks != 1 || o.completed != 1 || o.runs != 1:
			t.Errorf("payload %s: %d tasks, %d completed, %d runs; want 1 of each", id, o.tasks, o.completed, o.runs)
		default:
			continue
		}
		if bad++; bad == 20 {
			t.Fatal("and more")
		}
	}
	for id, o := range outcomes {
		if o.runs > 1 || o.tasks > 1 {
			t.Errorf("payload %s: %d tasks, %d runs", id, o.tasks, o.runs)
		}
	}

	// The old processes logged no error.
	for _, p := range old {
		if lines := p.errorLines(); len(lines) > 0 {
			t.Errorf("old worker %s logged errors:\n%s", p.id, strings.Join(lines, "\n"))
		}
	}
	t.Logf("%d tasks enqueued (%d by the current producer), every one completed once; after the migrations old-1 completed %d, old-2 %d",
		len(enqueued), len(newEnqueued), completedBy(t, pool, "old-1", migrated), completedBy(t, pool, "old-2", migrated))
}

// runsHandler records each run in upgrade_runs, as rollingMain's does.
func runsHandler(pool *pgxpool.Pool, workerID string) worker.Handlers {
	return worker.Handlers{"upgrade": func(ctx context.Context, t *worker.Task) error {
		var p struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, "INSERT INTO upgrade_runs (payload_id, worker_id, task_id) VALUES ($1, $2, $3)", p.ID, workerID, t.ID)
		return err
	}}
}

func schemaVersion(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var v int
	if err := pool.QueryRow(context.Background(), "SELECT skiplock_schema_version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// completedBy counts the tasks workerID completed after since.
func completedBy(t *testing.T, pool *pgxpool.Pool, workerID string, since time.Time) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM skiplock_tasks
		WHERE status = 'completed' AND worker_id = $1 AND finished_at > $2`, workerID, since).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func oldCommand(bin, dbURL string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	return cmd
}

// oldProc is a running process of the previous release.
type oldProc struct {
	id     string
	cmd    *exec.Cmd
	stdout lockedBuffer
	stderr lockedBuffer
	done   chan struct{} // closed once it has exited, with err set
	err    error
}

func startOld(t *testing.T, bin, dbURL, id string) *oldProc {
	t.Helper()
	p := &oldProc{id: id, cmd: oldCommand(bin, dbURL, "-id", id), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// checkRunning fails the test at once if the process has exited or
// logged an error.
func (p *oldProc) checkRunning(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("old worker %s exited (%v); stderr:\n%s", p.id, p.err, p.stderr.String())
	default:
	}
	if lines := p.errorLines(); len(lines) > 0 {
		t.Fatalf("old worker %s logged errors:\n%s", p.id, strings.Join(lines, "\n"))
	}
}

// terminate sends SIGTERM and waits for a clean exit.
func (p *oldProc) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signalling old worker %s: %v", p.id, err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("old worker %s exited with %v after SIGTERM; stderr:\n%s", p.id, p.err, p.stderr.String())
		}
	case <-time.After(pgtest.Patient(30 * time.Second)):
		t.Fatalf("old worker %s did not stop on SIGTERM; stderr:\n%s", p.id, p.stderr.String())
	}
}

func (p *oldProc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Kill()
		<-p.done
	}
}

// enqueued lists the payload IDs whose Enqueue returned.
func (p *oldProc) enqueued() []string {
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(p.stdout.String()))
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "enqueued "); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// errorLines are the lines of its stderr that report an error: slog's
// level=ERROR, and any other line that says "error".
func (p *oldProc) errorLines() []string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "level=ERROR") || strings.Contains(strings.ToLower(l), "error") {
			lines = append(lines, l)
		}
	}
	return lines
}

// lockedBuffer is a process's output, read while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
