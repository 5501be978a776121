package migrationlocks

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestMigrations runs the command on a small table over the newest
// migrations: a line per migration and one for the whole run, with calls
// of both loops overlapping the migrations, and the schema dropped.
func TestMigrations(t *testing.T) {
	t.Parallel()
	versions := migrations.Versions()
	from := versions[len(versions)-3]
	var out, log bytes.Buffer
	code := Command(context.Background(), []string{
		"-database-url", pgtest.Server(t).URL, "-finished", "2000", "-pending", "5000",
		"-from", fmt.Sprint(from), "-settle", "200ms",
	}, &out, &log)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), log.String())
	}
	t.Logf("\n%s", out.String())
	for i := len(versions) - 2; i < len(versions); i++ {
		if !strings.Contains(out.String(), fmt.Sprintf("%d → %d ", versions[i-1], versions[i])) {
			t.Errorf("no line for migration %d:\n%s", versions[i], out.String())
		}
	}
	if !strings.Contains(out.String(), fmt.Sprintf("%d → %d ", from, migrations.Latest)) {
		t.Errorf("no line for the whole run:\n%s", out.String())
	}
	fields := strings.Fields(strings.TrimSpace(out.String()[strings.LastIndex(strings.TrimSpace(out.String()), "\n"):]))
	if n := len(fields); n < 2 || fields[n-1] == "0" || fields[n-2] == "0" {
		t.Errorf("no enqueue or claim overlapped the migrations: %q", fields)
	}

	var left int
	err := pgtest.Pool(t).QueryRow(context.Background(),
		"SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1", schemaPrefix+"%").Scan(&left)
	if err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d schemas %s* left", left, schemaPrefix)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-from", "999"},
		{"-to", "1", "-from", "1"},
		{"-pending", "0"},
		{"-settle", "0s"},
	} {
		var out, log bytes.Buffer
		if code := Command(context.Background(), args, &out, &log); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if lines := strings.Count(strings.TrimSpace(log.String()), "\n"); lines != 0 || !strings.HasPrefix(log.String(), "skiplock-bench migrations: -") {
			t.Errorf("%q: want one line naming the flag, got %q", args, log.String())
		}
	}
}
