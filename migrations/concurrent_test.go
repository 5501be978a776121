package migrations_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
)

// TestConcurrentIndexes: the indexes a migration marks (-- skiplock:concurrently)
// are built after it, concurrently on a table of some size; an invalid one
// left by an interrupted build is built again by the next Up; the result
// is the index the file writes; and the newest migration marks no unique
// index (nothing would enforce it between that migration's commit, which
// lets new processes start, and the end of the build).
func TestConcurrentIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, idx := range migrations.ConcurrentIndexes[migrations.Latest] {
		if idx.Unique {
			t.Errorf("migration %d, the newest, marks the unique index %s to be built concurrently: build it in the migration until a newer one exists",
				migrations.Latest, idx.Name)
		}
	}
	var marked []string
	for v, idxs := range migrations.ConcurrentIndexes {
		names, _ := fs.Glob(migrations.FS(), fmt.Sprintf("%06d_*.up.sql", v))
		sql, _ := fs.ReadFile(migrations.FS(), names[0])
		for _, idx := range idxs {
			marked = append(marked, idx.Name)
			if !strings.Contains(string(sql), "INDEX "+idx.Name+"\n") && !strings.Contains(string(sql), "INDEX "+idx.Name+" ") {
				t.Errorf("migration %d: marked index %s is not in its file", v, idx.Name)
			}
		}
	}
	if len(marked) == 0 {
		t.Fatal("no migration marks an index to be built concurrently")
	}

	// A table over the threshold at version 1, then every migration.
	pool := pgtest.NewPool(t, pgtest.Schema(t, false))
	if err := migrations.Steps(ctx, pool, 1); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO skiplock_tasks (name, payload, status, finished_at)
		SELECT 'filler', jsonb_build_object('pad', repeat('x', 400)), 'completed', now()
		FROM generate_series(1, 60000)`)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	built := map[string]bool{} // name -> built concurrently (by any test of the package: the others' tables are small)
	migrations.OnBuild(func(name string, concurrently bool) {
		mu.Lock()
		defer mu.Unlock()
		built[name] = built[name] || concurrently
	})
	defer migrations.OnBuild(nil)
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	checkValid := func() {
		t.Helper()
		for _, name := range marked {
			var valid bool
			err := pool.QueryRow(ctx, `SELECT i.indisvalid FROM pg_index AS i WHERE i.indexrelid = to_regclass($1)`, name).Scan(&valid)
			if err != nil || !valid {
				t.Errorf("index %s after Up: valid %v, %v", name, valid, err)
			}
		}
	}
	checkValid()
	mu.Lock()
	for _, name := range marked {
		if !built[name] {
			t.Errorf("index %s on a table of 60,000 wide rows was not built concurrently", name)
		}
	}
	mu.Unlock()

	// The definitions match the files as other tools apply them.
	plain := pgtest.NewPool(t, pgtest.Schema(t, false))
	for _, v := range migrations.Versions() {
		names, _ := fs.Glob(migrations.FS(), fmt.Sprintf("%06d_*.up.sql", v))
		sql, _ := fs.ReadFile(migrations.FS(), names[0])
		if _, err := plain.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("applying %s as written: %v", names[0], err)
		}
	}
	for _, name := range marked {
		var want, got string
		q := `SELECT regexp_replace(pg_get_indexdef(to_regclass($1)), ' ON \S+\.', ' ON ')`
		if err := plain.QueryRow(ctx, q, name).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, q, name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("index %s:\n built: %s\n file:  %s", name, got, want)
		}
	}

	// An interrupted build leaves an invalid index; the next Up at that
	// version builds it again.
	if err := migrations.Steps(ctx, pool, -int(migrations.Latest)+3); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass('skiplock_tasks_lease_idx')`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	checkValid()
}
