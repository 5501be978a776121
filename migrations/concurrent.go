package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing/fstest"

	"github.com/golang-migrate/migrate/v4"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Indexes built concurrently.
//
// golang-migrate runs a file as one multi-statement exec, one transaction,
// and a CREATE INDEX in it blocks every write to its table (each enqueue,
// each claim) until the build ends; after an ALTER TABLE of the same file,
// until the file commits. An index statement that follows the line
//
//	-- skiplock:concurrently
//
// is taken out of its file when this runner applies it, and built right
// after that migration commits, before the next one runs, with CREATE INDEX
// CONCURRENTLY, which blocks no write. Other tools (psql, goose,
// golang-migrate's CLI, skiplock migrate sql) apply the file as written.
// On a table smaller than concurrentMinBytes the runner builds the index
// the plain way, which takes milliseconds there and waits for no other
// transaction of the database.
//
// A unique index may be marked only once its migration is not the newest:
// between the newest migration's commit, which lets new processes start,
// and the end of a concurrent build, nothing would enforce it
// (TestConcurrentIndexes).
const concurrentMarker = "-- skiplock:concurrently"

// concurrentMinBytes is the table size from which a marked index is built
// concurrently.
const concurrentMinBytes = 16 << 20

// onBuild, when set (by tests), is told of each build of a marked index.
var onBuild atomic.Pointer[func(name string, concurrently bool)]

// concurrentIndex is an index that the runner builds after its migration.
type concurrentIndex struct {
	Version    uint
	Name       string
	Table      string
	Unique     bool
	Plain      string // CREATE INDEX IF NOT EXISTS ...
	Concurrent string // CREATE INDEX CONCURRENTLY IF NOT EXISTS ...
}

var indexStatement = regexp.MustCompile(`(?is)^CREATE\s+(UNIQUE\s+)?INDEX\s+(\w+)\s+ON\s+(\w+)(\s.*);$`)

// runnerFiles are the files as this runner applies them, without the
// marked index statements; concurrentIndexes are those, by version.
var runnerFiles, concurrentIndexes = splitConcurrent(files)

func splitConcurrent(src fs.FS) (fs.FS, map[uint][]concurrentIndex) {
	out := fstest.MapFS{}
	indexes := map[uint][]concurrentIndex{}
	entries, err := fs.ReadDir(src, ".")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(src, e.Name())
		if err != nil {
			panic(err)
		}
		if strings.HasSuffix(e.Name(), ".up.sql") {
			prefix, _, _ := strings.Cut(e.Name(), "_")
			v, err := strconv.ParseUint(prefix, 10, 64)
			if err != nil {
				panic(fmt.Sprintf("migrations: bad file name %q", e.Name()))
			}
			var found []concurrentIndex
			b, found, err = takeConcurrent(string(b), uint(v))
			if err != nil {
				panic(fmt.Sprintf("migrations: %s: %v", e.Name(), err))
			}
			indexes[uint(v)] = found
		}
		out[e.Name()] = &fstest.MapFile{Data: b, Mode: 0o444}
	}
	return out, indexes
}

// takeConcurrent removes the marked index statements from sql.
func takeConcurrent(sql string, version uint) ([]byte, []concurrentIndex, error) {
	lines := strings.SplitAfter(sql, "\n")
	var kept strings.Builder
	var found []concurrentIndex
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != concurrentMarker {
			kept.WriteString(lines[i])
			continue
		}
		var stmt strings.Builder
		j := i + 1
		for ; j < len(lines); j++ {
			stmt.WriteString(lines[j])
			if strings.HasSuffix(strings.TrimSpace(lines[j]), ";") {
				break
			}
		}
		m := indexStatement.FindStringSubmatch(strings.TrimSpace(stmt.String()))
		if m == nil {
			return nil, nil, fmt.Errorf("line %d: %s is not followed by CREATE [UNIQUE] INDEX name ON table ...;", i+1, concurrentMarker)
		}
		unique := strings.TrimSpace(m[1]) != ""
		create := "CREATE INDEX"
		if unique {
			create = "CREATE UNIQUE INDEX"
		}
		found = append(found, concurrentIndex{
			Version: version, Name: m[2], Table: m[3], Unique: unique,
			Plain:      create + " IF NOT EXISTS " + m[2] + " ON " + m[3] + m[4],
			Concurrent: create + " CONCURRENTLY IF NOT EXISTS " + m[2] + " ON " + m[3] + m[4],
		})
		fmt.Fprintf(&kept, "-- %s: built after this migration by the runner\n", m[2])
		i = j
	}
	return []byte(kept.String()), found, nil
}

// stepUp applies the next n migrations (every one when n < 0) one at a
// time, building each one's marked indexes after it. It first builds
// those of the current version, which a run stopped between a migration
// and its indexes left behind.
func stepUp(ctx context.Context, pool *pgxpool.Pool, m *migrate.Migrate, n int) error {
	current, dirty, err := m.Version()
	switch {
	case errors.Is(err, migrate.ErrNilVersion):
		current = 0
	case err != nil:
		return err
	case dirty:
		return migrate.ErrDirty{Version: int(current)}
	}
	if err := buildConcurrent(ctx, pool, current); err != nil {
		return err
	}
	var next []uint
	for _, v := range Versions() {
		if v > current {
			next = append(next, v)
		}
	}
	short := 0
	if n >= 0 && n < len(next) {
		next = next[:n]
	} else if n > len(next) {
		short = n - len(next)
	}
	if len(next) == 0 && short == 0 {
		return migrate.ErrNoChange
	}
	for _, v := range next {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := m.Migrate(v); err != nil {
			return err
		}
		if err := buildConcurrent(ctx, pool, v); err != nil {
			return err
		}
	}
	if short > 0 {
		return migrate.ErrShortLimit{Short: uint(short)}
	}
	return nil
}

// buildConcurrent builds the marked indexes of version that are missing or
// invalid (an interrupted concurrent build leaves an invalid one).
func buildConcurrent(ctx context.Context, pool *pgxpool.Pool, version uint) error {
	q, x := db.New(), pgerr.Interpreting(pool)
	for _, idx := range concurrentIndexes[version] {
		st, err := q.SchemaIndexState(ctx, x, db.SchemaIndexStateParams{IndexName: idx.Name, TableName: idx.Table})
		if err != nil {
			return fmt.Errorf("migration %d: index %s: %w", version, idx.Name, err)
		}
		if st.IndexExists && st.IndexValid {
			continue
		}
		if st.IndexExists {
			if _, err := pool.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+idx.Name); err != nil {
				return fmt.Errorf("migration %d: dropping the invalid index %s: %w", version, idx.Name, err)
			}
		}
		stmt, concurrently := idx.Concurrent, st.TableBytes >= concurrentMinBytes
		if !concurrently {
			stmt = idx.Plain
		}
		if f := onBuild.Load(); f != nil {
			(*f)(idx.Name, concurrently)
		}
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("migration %d: building index %s: %w", version, idx.Name, err)
		}
	}
	return nil
}
