package devpg

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// tlog routes devpg progress lines into the test log so a slow or failed
// boot explains itself in "go test -v" output.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func find(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.Log = tlog{t}
	srv, err := Find(testCtx(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv
}

func queryInt(t *testing.T, url, sql string) int {
	t.Helper()
	ctx := testCtx(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func execSQL(t *testing.T, url, sql string) {
	t.Helper()
	ctx := testCtx(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Without env vars Find must produce something usable on any machine:
// the local server here, a throwaway one on a fresh box.
func TestFindDefault(t *testing.T) {
	srv := find(t, Options{})
	if srv.Source != "local" && srv.Source != "throwaway" {
		t.Fatalf("Source = %q, want local or throwaway", srv.Source)
	}
	if got := queryInt(t, srv.URL, "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
}

func TestFindEnvVar(t *testing.T) {
	base := find(t, Options{})

	t.Setenv("DEVPG_TEST_EMPTY", "")
	t.Setenv("DEVPG_TEST_URL", base.URL)
	srv := find(t, Options{EnvVars: []string{"DEVPG_TEST_UNSET_X", "DEVPG_TEST_EMPTY", "DEVPG_TEST_URL"}})
	if srv.Source != "env:DEVPG_TEST_URL" {
		t.Fatalf("Source = %q, want env:DEVPG_TEST_URL", srv.Source)
	}
	if srv.URL != base.URL {
		t.Fatalf("URL = %q, want it used as-is: %q", srv.URL, base.URL)
	}
	if got := queryInt(t, srv.URL, "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close of env server: %v", err)
	}
	err := srv.Restart(testCtx(t))
	if err == nil || !strings.Contains(err.Error(), "restart needs a throwaway server") {
		t.Fatalf("Restart of env server: err = %v", err)
	}
}

// A dead server named by an env var must be an error, not a silent
// fall-through to the (working) local server.
func TestFindEnvVarDead(t *testing.T) {
	t.Setenv("DEVPG_TEST_DEAD", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable")
	t.Setenv("DEVPG_TEST_LATER", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	start := time.Now()
	srv, err := Find(testCtx(t), Options{EnvVars: []string{"DEVPG_TEST_DEAD", "DEVPG_TEST_LATER"}})
	if err == nil {
		srv.Close()
		t.Fatalf("Find succeeded with %s via %s", srv.URL, srv.Source)
	}
	if !strings.Contains(err.Error(), "DEVPG_TEST_DEAD") {
		t.Fatalf("error does not name the variable: %v", err)
	}
	t.Logf("error after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

func TestThrowaway(t *testing.T) {
	srv := find(t, Options{SkipLocal: true})
	if srv.Source != "throwaway" {
		t.Fatalf("Source = %q, want throwaway", srv.Source)
	}
	if got := queryInt(t, srv.URL, "SELECT current_setting('port')::int"); got != srv.port {
		t.Fatalf("server port = %d, want %d", got, srv.port)
	}
	if os.Geteuid() == 0 {
		fi, err := os.Stat(srv.dataDir())
		if err != nil {
			t.Fatal(err)
		}
		if ownerOf(fi) == 0 {
			t.Fatalf("data dir owned by root; the non-root path was not taken")
		}
		if srv.runAs == nil {
			t.Fatal("running as root but runAs is nil")
		}
		t.Logf("cluster runs as %s (uid %d)", srv.runAs.name, srv.runAs.uid)
	}

	execSQL(t, srv.URL, "CREATE TABLE survives (n int); INSERT INTO survives VALUES (42)")
	before := queryInt(t, srv.URL, "SELECT pg_backend_pid()")

	start := time.Now()
	if err := srv.Restart(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart took %s", time.Since(start).Round(time.Millisecond))
	if got := queryInt(t, srv.URL, "SELECT n FROM survives"); got != 42 {
		t.Fatalf("after restart n = %d, want 42", got)
	}
	// Uptime since restart shows this really is a new postmaster, not the
	// old one still running.
	if got := queryInt(t, srv.URL, "SELECT extract(epoch FROM now() - pg_postmaster_start_time())::int"); got > int(time.Since(start).Seconds())+1 {
		t.Fatalf("postmaster uptime %ds predates the restart (old backend pid %d)", got, before)
	}

	dir := srv.dir
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("dir %s still exists after Close (stat err %v)", dir, err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := srv.Restart(testCtx(t)); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
	if _, err := pgx.Connect(testCtx(t), srv.URL); err == nil {
		t.Fatal("server still answers after Close")
	}
}

func TestNoBinaries(t *testing.T) {
	old := binDirGlobs
	t.Cleanup(func() { binDirGlobs = old })
	binDirGlobs = []string{t.TempDir()}
	t.Setenv("PATH", "")

	if _, err := findBinaries(); !errors.Is(err, errNoPostgres) {
		t.Fatalf("findBinaries: err = %v, want errNoPostgres", err)
	}
	_, err := Find(testCtx(t), Options{SkipLocal: true})
	if !errors.Is(err, errNoPostgres) {
		t.Fatalf("Find: err = %v, want errNoPostgres", err)
	}
	for _, want := range []string{"DATABASE_URL", "apt-get install postgresql", "brew install postgresql"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestFindBinariesPrefersNewest(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9.6", "15", "13"} {
		bin := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"initdb", "pg_ctl"} {
			if err := os.WriteFile(filepath.Join(bin, exe(name)), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A newer version with only half the binaries must be passed over.
	partial := filepath.Join(root, "16", "bin")
	if err := os.MkdirAll(partial, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, exe("pg_ctl")), nil, 0o755); err != nil {
		t.Fatal(err)
	}

	old := binDirGlobs
	t.Cleanup(func() { binDirGlobs = old })
	binDirGlobs = []string{filepath.Join(root, "*", "bin")}
	t.Setenv("PATH", "")

	got, err := findBinaries()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "15", "bin"); got != want {
		t.Fatalf("findBinaries = %s, want %s", got, want)
	}
}

// Server.URL must be usable by pgx for every local candidate, including
// the socket one whose host lives in the query string.
func TestLocalCandidatesParse(t *testing.T) {
	for _, c := range localCandidates() {
		cfg, err := pgx.ParseConfig(c.url)
		if err != nil {
			t.Fatalf("%s: %v", c.desc, err)
		}
		if strings.Contains(c.desc, localSocketDir) && cfg.Host != localSocketDir {
			t.Fatalf("%s: host = %q, want %q", c.desc, cfg.Host, localSocketDir)
		}
		if cfg.Database != "postgres" {
			t.Fatalf("%s: database = %q", c.desc, cfg.Database)
		}
	}
}

// A URL with a password that devpg cannot use (unreachable, unparsable):
// the error names the variable, never the password.
func TestFindEnvVarPassword(t *testing.T) {
	for _, url := range []string{
		"postgres://postgres:s3cret@127.0.0.1:1/postgres?sslmode=disable",
		"postgres://postgres:s3cret@127.0.0.1:notaport/postgres",
		"host=127.0.0.1 port=notaport password='s3cret x'",
	} {
		t.Setenv("DEVPG_TEST_SECRET", url)
		srv, err := Find(testCtx(t), Options{EnvVars: []string{"DEVPG_TEST_SECRET"}})
		if err == nil {
			srv.Close()
			t.Fatalf("Find succeeded with %s", url)
		}
		if !strings.Contains(err.Error(), "DEVPG_TEST_SECRET") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v", url, err)
		}
	}
}
