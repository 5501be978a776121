package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// gooseVersion is the goose docs/SQL.md's recipe is tested with. Built
// without its other databases' drivers: about 40 s on a busy 2-core machine
// with an empty build cache, 2 s with a warm one.
const gooseVersion = "v3.29.0"

// docs/SQL.md's recipes for applying the schema with another tool, run as
// written by bash with the real tools, then a worker on the schema.

func TestRecipePsql(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema, bin := recipeSetup(t, "skiplock")
	pgtest.Psql(t)
	runRecipe(t, "psql", bin, schema)
	pool := pgtest.NewPool(t, schema)
	var table *string
	pool.QueryRow(ctx, "SELECT to_regclass('skiplock_schema_migrations')::text").Scan(&table)
	if table != nil {
		t.Fatalf("psql recipe created %s", *table)
	}
	workerRunsTask(t, pool)
}

func TestRecipeGolangMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema, bin := recipeSetup(t, "migrate")
	runRecipe(t, "golang-migrate", bin, schema)
	pool := pgtest.NewPool(t, schema)
	// At its defaults the CLI keeps its version in schema_migrations, not
	// in skiplock's table.
	var version int64
	var dirty bool
	if err := pool.QueryRow(ctx, "SELECT version, dirty FROM schema_migrations").Scan(&version, &dirty); err != nil ||
		version != int64(migrations.Latest) || dirty {
		t.Fatalf("schema_migrations: version %d, dirty %v, %v", version, dirty, err)
	}
	workerRunsTask(t, pool)
}

func TestRecipeGoose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema, bin := recipeSetup(t, "skiplock", "goose")
	dir := runRecipe(t, "goose", bin, schema)
	pool := pgtest.NewPool(t, schema)
	var applied int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM goose_db_version WHERE version_id > 0 AND is_applied").Scan(&applied); err != nil || applied != 1 {
		t.Fatalf("goose_db_version: %d migrations applied, %v", applied, err)
	}
	workerRunsTask(t, pool)

	// goose down runs the file's down section: nothing of skiplock is left.
	goose := exec.Command(filepath.Join(bin, "goose"), "-dir", "db/migrations", "postgres", pgtest.Server(t).URL, "down")
	goose.Dir, goose.Env = dir, append(os.Environ(), "PGOPTIONS=-c search_path="+schema)
	if out, err := goose.CombinedOutput(); err != nil {
		t.Fatalf("goose down: %v\n%s", err, out)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname LIKE 'skiplock%')
		+ (SELECT count(*) FROM pg_proc WHERE pronamespace = $1::regnamespace)`, schema).Scan(&left); err != nil || left != 0 {
		t.Fatalf("after goose down: %d skiplock objects left (%v)", left, err)
	}
}

// recipeSetup makes a fresh, empty schema and builds the tools a recipe
// runs into a directory, which it returns.
func recipeSetup(t *testing.T, tools ...string) (schema, bin string) {
	t.Helper()
	schema, bin = pgtest.Schema(t, false), t.TempDir()
	for _, tool := range tools {
		var args []string
		env := os.Environ()
		switch tool {
		case "skiplock":
			args = []string{"build", "-o", bin, "github.com/skiplock/skiplock/cmd/skiplock"}
		case "migrate": // golang-migrate's CLI at the version in go.mod
			args = []string{"build", "-tags", "pgx5", "-o", bin, "github.com/golang-migrate/migrate/v4/cmd/migrate"}
		case "goose":
			args = []string{"install", "-tags", "no_clickhouse no_libsql no_mssql no_mysql no_sqlite3 no_vertica no_ydb",
				"github.com/pressly/goose/v3/cmd/goose@" + gooseVersion}
			env = append(env, "GOBIN="+bin)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("building %s (go %s; goose comes from the Go module proxy): %v\n%s", tool, strings.Join(args, " "), err, out)
		}
	}
	return schema, bin
}

// recipe is the shell block that follows <!-- recipe: name --> in the
// docs/SQL.md.
func recipe(t *testing.T, name string) string {
	t.Helper()
	readme, err := os.ReadFile("../docs/SQL.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- recipe: " + regexp.QuoteMeta(name) + " -->\n```sh\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatalf("docs/SQL.md has no recipe %q", name)
	}
	return string(m[1])
}

// runRecipe runs docs/SQL.md's recipe with bash in a fresh directory, which
// it returns, with the tools of bin first in PATH, DATABASE_URL the test
// server and PGOPTIONS naming schema, as docs/SQL.md says. The directory is
// a user's project: a Go module that requires skiplock (this checkout).
func runRecipe(t *testing.T, name, bin, schema string) string {
	t.Helper()
	dir := t.TempDir()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	gomod := fmt.Sprintf("module example.com/app\n\ngo 1.26\n\nrequire github.com/skiplock/skiplock v0.0.0\n\nreplace github.com/skiplock/skiplock => %s\n", root)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patient(10*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", recipe(t, name))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"DATABASE_URL="+pgtest.Server(t).URL,
		"PGOPTIONS=-c search_path="+schema)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("recipe %s: %v\n%s", name, err, out)
	}
	return dir
}

// workerRunsTask starts a worker on pool's schema, which must accept it,
// and waits for a task to run with its payload.
func workerRunsTask(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	got := make(chan string, 1)
	w := worker.New(pool, worker.Config{Logger: slog.New(slog.DiscardHandler), PollInterval: 100 * time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- w.Run(runCtx, worker.Handlers{"recipe": func(_ context.Context, task *worker.Task) error {
			got <- string(task.Payload)
			return nil
		}})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("worker: %v", err)
		}
	}()
	if _, err := queue.New(pool).Enqueue(ctx, "recipe", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != `{"n": 1}` && p != `{"n":1}` {
			t.Fatalf("task ran with payload %s", p)
		}
	case err := <-done:
		t.Fatalf("worker refused the schema: %v", err)
	case <-time.After(pgtest.Patient(time.Second)):
		t.Fatalf("no task ran within %s", pgtest.Patient(time.Second))
	}
}
