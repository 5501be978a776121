package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The harness runs the example in a scratch schema: the example works every
// task, and the advice at the end names a schema that still exists.
func TestQuickstart(t *testing.T) {
	server := pgtest.Server(t)
	// With a password (the server trusts the loopback, so any will do):
	// what the harness prints never shows it.
	u, err := url.Parse(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "s3cret/pw")
	t.Setenv("DATABASE_URL", u.String())
	exists := func(schema string) bool {
		conn, err := pgx.Connect(context.Background(), server.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var found bool
		err = conn.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&found)
		if err != nil {
			t.Fatal(err)
		}
		return found
	}
	for _, keep := range []bool{false, true} {
		schema := fmt.Sprintf("skiplock_qs_test_%d_%v", os.Getpid(), keep)
		t.Cleanup(func() {
			conn, err := pgx.Connect(context.Background(), server.URL)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
				t.Error(err)
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patient(30*time.Second))
		var out, errOut bytes.Buffer
		err := run(ctx, &out, &errOut, keep, schema)
		cancel()
		if err != nil {
			t.Fatalf("keep=%v: %v\n%s\n%s", keep, err, out.String(), errOut.String())
		}
		text := out.String()
		if exists(schema) != keep {
			t.Fatalf("keep=%v: schema exists=%v after the run", keep, !keep)
		}
		for _, want := range []string{"Migrated schema " + schema, "Enqueued 6 tasks.", "payment captured on attempt 2"} {
			if !strings.Contains(text, want) {
				t.Errorf("keep=%v: output lacks %q:\n%s", keep, want, text)
			}
		}
		if n := len(regexp.MustCompile(`\s+completed\s+`).FindAllString(text, -1)); n != 5 || !regexp.MustCompile(`image\.resize\s+failed`).MatchString(text) {
			t.Errorf("keep=%v: %d tasks completed, want 5 and image.resize failed:\n%s", keep, n, text)
		}
		if strings.Contains(text+errOut.String(), "s3cret") {
			t.Errorf("keep=%v: the output shows the password:\n%s\n%s", keep, text, errOut.String())
		}
		if keep && !strings.Contains(text, "skiplock requeue --failed --database-url") || keep && !strings.Contains(text, "search_path="+schema) {
			t.Errorf("keep: the advice does not name the kept schema:\n%s", text)
		}
		if !keep && (strings.Contains(text, "puts its failed tasks back") || !strings.Contains(text, "-keep")) {
			t.Errorf("without -keep: the advice points at a dropped schema:\n%s", text)
		}
	}
}
