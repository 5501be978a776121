package upgrade

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
)

// compatMigrations is how many of the newest migrations
// TestPreviousReleaseOnNewestSchema checks.
const compatMigrations = 3

// compatTests are the tests of the previous release that run against the
// newest schema: enqueue, claim, complete, retry, snooze, unique and
// exclusive keys, pause, cancel, rescue and retention on the worker's side,
// the operators' calls on the queue's. Each must exist in every release
// checked and pass there; a test renamed since is replaced here by one that
// exists in both.
var compatTests = map[string][]string{
	"./worker": {
		"TestAdvisoryLocks", "TestPriorityOrder", "TestDelayedTaskWaits", "TestQueuesAreSeparate",
		"TestUniqueKeysUnderConcurrentEnqueue", "TestExclusiveKeyNeverRunsTwice", "TestSnooze",
		"TestPauseAndResume", "TestCancelRunningTask", "TestRescuerNamesWhatWasLost", "TestRetention",
	},
	"./queue": {
		"TestRequeueByID", "TestCancel", "TestPurge", "TestList", "TestStats", "TestTxTwins", "TestEnqueueBatch",
	},
}

// TestPreviousReleaseOnNewestSchema checks that migrations are
// expand-then-contract: for each of the newest compatMigrations
// migrations, the release just before it (the first parent of the commit
// that added it, or HEAD for a migration not committed yet) runs its own
// worker and queue tests, with its own queries (its db package), against a
// schema migrated to the newest version. A migration that drops or renames
// what that release reads or writes, or adds a constraint its writes
// break, fails here.
func TestPreviousReleaseOnNewestSchema(t *testing.T) {
	t.Parallel()
	r := openRepo(t)
	versions := migrations.Versions()
	if len(versions) > compatMigrations {
		versions = versions[len(versions)-compatMigrations:]
	}
	var run []string
	for _, tests := range compatTests {
		run = append(run, tests...)
	}
	pattern := "^(" + strings.Join(run, "|") + ")$"
	serverURL := pgtest.Server(t).URL

	checked := map[string]bool{}
	for i := len(versions) - 1; i >= 0; i-- {
		v := versions[i]
		release := r.releaseBefore(t, v)
		if checked[release] {
			continue // two migrations added by one commit
		}
		checked[release] = true
		t.Run(fmt.Sprintf("before_%06d", v), func(t *testing.T) {
			t.Logf("release %s (before migration %d) on schema version %d", release[:12], v, migrations.Latest)
			src := r.extract(t, release)
			replaceMigrations(t, filepath.Join(src, "migrations"))
			// A test that hangs on the newest schema fails within the timeout.
			args := []string{"test", "-count=1", "-vet=off", "-timeout=5m", "-v", "-run", pattern}
			for pkg := range compatTests {
				args = append(args, pkg)
			}
			out := runGo(t, src, []string{"TEST_DATABASE_URL=" + serverURL}, args...)
			for pkg, tests := range compatTests {
				for _, name := range tests {
					if !regexp.MustCompile(`(?m)^--- PASS: ` + name + ` `).MatchString(out) {
						t.Errorf("%s %s did not pass on the newest schema (or does not exist in %s)", pkg, name, release[:12])
					}
				}
			}
			if t.Failed() {
				t.Logf("go test output:\n%s", out)
			}
		})
	}
}

// releaseBefore is the commit just before migration v was added: the
// first parent of the main-line commit that added its up file, or HEAD
// when no commit has added it yet.
func (r repo) releaseBefore(t *testing.T, v uint) string {
	t.Helper()
	added := r.git(t, "log", "--first-parent", "--diff-filter=A", "--format=%H", "--",
		fmt.Sprintf(":(glob)migrations/%06d_*.up.sql", v))
	if added == "" {
		return r.git(t, "rev-parse", "HEAD")
	}
	lines := strings.Fields(added)
	return r.git(t, "rev-parse", lines[len(lines)-1]+"^1")
}

// replaceMigrations puts this build's migration files in dir in place of
// the release's own, so that its migrations.Up (and so its tests' schemas)
// reach the newest version.
func replaceMigrations(t *testing.T, dir string) {
	t.Helper()
	old, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	err = fs.WalkDir(migrations.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS(), path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, path), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
