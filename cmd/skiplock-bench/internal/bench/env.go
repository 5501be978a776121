package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/cpustat"
	"github.com/skiplock/skiplock/internal/testinfra/devpg"
	"github.com/skiplock/skiplock/internal/testschema"
	"github.com/skiplock/skiplock/migrations"
)

// schemaPrefix marks the bench's schemas; the number after it is the
// creation time, so a later run can sweep what a killed run left behind.
const schemaPrefix = "skiplock_bench_"

// env is the server the bench runs against.
type env struct {
	url    string
	source string
	srv    *devpg.Server // set when devpg found or booted the server
	// schemaSQL runs on each new schema after migrating (Options.SchemaSQL).
	schemaSQL string
	// schemaMade is Options.schemaMade.
	schemaMade func(name string)
	// postmaster is the server's main process when it runs on this
	// machine (and /proc shows it), else 0.
	postmaster int
}

// findPostmaster finds the server's main process, the parent of a backend,
// when the server runs on this machine.
func (e *env) findPostmaster(ctx context.Context) {
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	var pid int
	if conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid) != nil {
		return
	}
	// A backend of a remote server may share a pid with a local process;
	// only trust a parent named postgres.
	if ppid, _, _, ok := cpustat.Stat(pid); ok {
		if comm, err := os.ReadFile("/proc/" + strconv.Itoa(ppid) + "/comm"); err == nil && strings.TrimSpace(string(comm)) == "postgres" {
			e.postmaster = ppid
		}
	}
}

func openEnv(ctx context.Context, opts Options, prog *progress) (*env, error) {
	if opts.DatabaseURL != "" {
		return &env{url: opts.DatabaseURL, source: "--database-url"}, nil
	}
	srv, err := devpg.Find(ctx, devpg.Options{EnvVars: []string{"DATABASE_URL"}, Log: progressWriter{prog}})
	if err != nil {
		return nil, err
	}
	return &env{url: srv.URL, source: srv.Source, srv: srv}, nil
}

func (e *env) close() {
	if e.srv != nil && e.srv.Source == "throwaway" {
		e.srv.Close()
	}
}

// progressWriter sends devpg's log lines to the progress output.
type progressWriter struct{ p *progress }

func (w progressWriter) Write(b []byte) (int, error) {
	w.p.logf("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// sweep drops bench schemas older than an hour.
func (e *env) sweep(ctx context.Context) error {
	return testschema.DropStale(ctx, e.url, schemaPrefix, time.Hour)
}

// schema is one run's fresh, migrated schema and a pool on it.
type schema struct {
	env      *env
	name     string
	pool     *pgxpool.Pool
	producer *pgxpool.Pool // newRunSchema's producer pool, if any
}

// newSchema creates and migrates a schema; poolConns sizes its pool (0 keeps
// pgxpool's default, max(4, GOMAXPROCS)).
func (e *env) newSchema(ctx context.Context, poolConns int) (*schema, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := testschema.Name(schemaPrefix, hex.EncodeToString(b[:]))
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+name)
	conn.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating schema: %w", err)
	}
	if e.schemaMade != nil {
		e.schemaMade(name)
	}
	s := &schema{env: e, name: name}
	s.pool, err = s.newPool(ctx, poolConns)
	if err == nil {
		err = migrations.Up(ctx, s.pool)
	}
	if err == nil && e.schemaSQL != "" {
		_, err = s.pool.Exec(ctx, e.schemaSQL)
	}
	if err != nil {
		s.drop()
		return nil, fmt.Errorf("preparing schema %s: %w", name, err)
	}
	return s, nil
}

// newRunSchema is newSchema, with pgxpool's default pool, and a producer
// pool of producerConns connections on it; drop closes both.
func (e *env) newRunSchema(ctx context.Context, producerConns int) (*schema, *pgxpool.Pool, error) {
	s, err := e.newSchema(ctx, 0)
	if err != nil {
		return nil, nil, err
	}
	if s.producer, err = s.newPool(ctx, producerConns); err != nil {
		s.drop()
		return nil, nil, err
	}
	return s, s.producer, nil
}

// newPool opens a pool whose search_path is the schema.
func (s *schema) newPool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := s.poolConfig()
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = int32(maxConns)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// poolConfig is the configuration of a pool whose search_path is the
// schema.
func (s *schema) poolConfig() (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(s.env.url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = s.name
	return cfg, nil
}

// drop removes the schema, even when the run's context is cancelled.
func (s *schema) drop() {
	if s.producer != nil {
		s.producer.Close()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.env.url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.name}.Sanitize()+" CASCADE")
}

// vacuum brings the table to the state a backlog that built up over time
// would be in: statistics collected, hint bits set, visibility map current.
// Without it a freshly loaded backlog pays for first-touch hint-bit writes
// during the run, and on a server with autovacuum off the claim is planned
// without statistics.
func (s *schema) vacuum(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "VACUUM (ANALYZE) skiplock_tasks")
	return err
}

// buildRevision can be set with -ldflags "-X ...bench.buildRevision=rev" for
// builds without VCS information (from a source archive, say).
var buildRevision string

// Machine describes where the bench ran.
type Machine struct {
	CPUs      int     `json:"cpus"`
	CPUModel  string  `json:"cpu_model,omitempty"`
	MemoryGiB float64 `json:"memory_gib,omitempty"`
	GoVersion string  `json:"go_version"`
	// Build is the VCS revision the bench was built from, "+dirty" when
	// the tree had changes.
	Build     string            `json:"build,omitempty"`
	OS        string            `json:"os"`
	Server    string            `json:"server"`
	PGVersion string            `json:"pg_version"`
	Settings  map[string]string `json:"pg_settings"`
}

// pgSettings are the server settings that move queue numbers.
var pgSettings = []string{
	"shared_buffers", "synchronous_commit", "fsync", "wal_level", "max_wal_size", "checkpoint_timeout",
	"autovacuum", "max_connections", "max_locks_per_transaction", "work_mem", "ssl",
}

func (e *env) machine(ctx context.Context) (Machine, error) {
	m := Machine{
		CPUs:      runtime.NumCPU(),
		GoVersion: runtime.Version(),
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
		Server:    e.source,
		Settings:  map[string]string{},
	}
	m.CPUModel, m.MemoryGiB = cpuAndMemory()
	m.Build = buildRevision
	if info, ok := debug.ReadBuildInfo(); ok && m.Build == "" {
		var rev, dirty string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value[:min(len(s.Value), 12)]
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if rev != "" {
			m.Build = rev + dirty
		}
	}
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return m, err
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&m.PGVersion); err != nil {
		return m, err
	}
	for _, name := range pgSettings {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err == nil {
			m.Settings[name] = v
		}
	}
	return m, nil
}

func cpuAndMemory() (model string, memGiB float64) {
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				memGiB = kb / (1 << 20)
			}
		}
	}
	return model, memGiB
}
