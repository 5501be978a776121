package main

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestSchemaCost runs schema-cost.sql, small, on a migrated schema: one
// line per copy, in order, each with the parts its name says it keeps of
// that schema's skiplock_tasks and a time for both statements, and the
// copies' schema dropped. It fails when a migration renames an index the
// script keeps by name, or adds a part the script does not strip.
func TestSchemaCost(t *testing.T) {
	t.Parallel()
	psql := pgtest.Psql(t)
	ctx := context.Background()
	schema := pgtest.Schema(t, true)
	pool := pgtest.NewPool(t, schema)
	var indexes, checks, triggers int
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_index WHERE indrelid = 'skiplock_tasks'::regclass),
		(SELECT count(*) FROM pg_constraint WHERE conrelid = 'skiplock_tasks'::regclass AND contype = 'c'),
		(SELECT count(*) FROM pg_trigger WHERE tgrelid = 'skiplock_tasks'::regclass AND NOT tgisinternal
		   AND tgtype & 16 <> 0 AND tgattr::text <> '')`).Scan(&indexes, &checks, &triggers)
	if err != nil {
		t.Fatal(err)
	}
	if checks == 0 || triggers == 0 || indexes <= 4 {
		t.Fatalf("skiplock_tasks has %d indexes, %d checks, %d status triggers: the copies would differ in nothing", indexes, checks, triggers)
	}

	cmd := exec.Command(psql, "-X", "-q", "-A", "-t", "-F", " ",
		"-v", "tasks=2000", "-v", "batch=100", "-v", "claims=10",
		"-f", "schema-cost.sql", pgtest.Server(t).URL)
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+schema)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	t.Logf("\n%s", out)

	want := []struct {
		copy                      string
		indexes, checks, triggers int
	}{
		{"full", indexes, checks, triggers},
		{"no_checks", indexes, 0, triggers},
		{"no_triggers", indexes, 0, 0},
		{"four_indexes", 4, 0, 0},
		{"two_indexes", 2, 0, 0},
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		f := strings.Fields(lines[i])
		if len(f) < 7 {
			t.Fatalf("line %q: want copy, indexes, checks, triggers, claim, write, task", lines[i])
		}
		if f[0] != w.copy || f[1] != strconv.Itoa(w.indexes) || f[2] != strconv.Itoa(w.checks) || f[3] != strconv.Itoa(w.triggers) {
			t.Errorf("line %q: want %s with %d indexes, %d checks, %d triggers", lines[i], w.copy, w.indexes, w.checks, w.triggers)
		}
		for _, us := range f[4:7] {
			if v, err := strconv.ParseFloat(us, 64); err != nil || v <= 0 {
				t.Errorf("line %q: time %q is not a positive number", lines[i], us)
			}
		}
	}

	var left bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'skiplock_cost')").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left {
		t.Error("the schema skiplock_cost was left behind")
	}
}
