package connstr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// secret is every test's password; no output may contain it.
const secret = "s3cret"

func TestPasswords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		conn string
		want string // one of Passwords' results
	}{
		{"postgres://u:s3cret@host/db", "s3cret"},
		{"postgresql://u:s3cret@h1:5432,h2:5433/db?sslmode=disable", "s3cret"},
		{"POSTGRES://u:s3cret@host/db", "s3cret"},
		{"postgres://u:s3%2Fcret@host/db", "s3/cret"},
		{"postgres://u:s3%2Fcret@host/db", "s3%2Fcret"},
		{"postgres://u@host/db?password=s3cret&sslmode=disable", "s3cret"},
		{"postgres://u@host/db?sslpassword=s3cret", "s3cret"},
		// Malformed: pgx cannot parse them, the text is searched.
		{"postgres://u:s3cret@host:notaport/db", "s3cret"},
		{"postgres://u:s3/cret@host/db", "s3/cret"},
		{"postgres://u:s3@cret@host:x/db", "s3@cret"},
		{"postgres://u:s3%cret@host/db", "s3%cret"},
		{"host=h user=u password=s3cret dbname=db", "s3cret"},
		{"host=h user=u password='s3 cret' port=notaport", "s3 cret"},
		{`password='it\'s s3cret' host=h`, `it's s3cret`},
		{"host=h sslpassword=s3cret", "s3cret"},
	} {
		got := Passwords(c.conn)
		found := false
		for _, p := range got {
			found = found || p == c.want
		}
		if !found {
			t.Errorf("Passwords(%q) = %q, want it to hold %q", c.conn, got, c.want)
		}
	}
	if got := Passwords("postgres://u@host/db?sslmode=disable"); len(got) != 0 {
		t.Errorf("Passwords of a URL without one: %q", got)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ text, conn, want string }{
		{"postgres://u:s3cret@host/db", "postgres://u:s3cret@host/db", "postgres://u:xxxxx@host/db"},
		{"dial postgres://u:p%40ss@h/db: refused (p@ss)", "postgres://u:p%40ss@h/db", "dial postgres://u:xxxxx@h/db: refused (xxxxx)"},
		{"cannot parse `host=h password='a b c'`", "host=h password='a b c'", "cannot parse `host=h password=xxxxx`"},
		{"nothing to hide", "postgres://u@h/db", "nothing to hide"},
	} {
		if got := Redact(c.text, c.conn); got != c.want {
			t.Errorf("Redact(%q, %q) = %q, want %q", c.text, c.conn, got, c.want)
		}
	}
}

// TestPgxErrors: whatever pgx puts in its errors (a string it cannot parse,
// a server it cannot reach, a host that does not resolve), Error and Redact
// leave no password in them.
func TestPgxErrors(t *testing.T) {
	t.Parallel()
	for _, conn := range []string{
		"postgres://u:s3cret@host:notaport/db",
		"postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=2",
		"postgres://u:s3cret@nonexistent.invalid:5432/db?connect_timeout=2",
		"postgres://u:s3cret@127.0.0.1:5432/db?sslmode=bogus",
		"postgres://u:s3%cret@127.0.0.1:5432/db",
		"postgres://u:s3cret@[::1/db",
		"postgres://u:s3cret@127.0.0.1:5432/db?connect_timeout=abc",
		"postgres://u:s3cret@127.0.0.1:5432/db?pool_max_conns=abc",
		"host=127.0.0.1 port=notaport user=u password=s3cret",
		"host=127.0.0.1 port=1 user=u password='s3cret' connect_timeout=2",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, perr := pgxpool.ParseConfig(conn)
		conn2, cerr := pgx.Connect(ctx, conn)
		cancel()
		if conn2 != nil {
			conn2.Close(context.Background())
		}
		for _, err := range []error{perr, cerr} {
			if err == nil {
				continue
			}
			wrapped := Error(fmt.Errorf("connecting: %w", err), Passwords(conn)...)
			if strings.Contains(wrapped.Error(), secret) || strings.Contains(Redact(err.Error(), conn), secret) {
				t.Errorf("%q: %q", conn, wrapped)
			}
			if !errors.Is(wrapped, err) {
				t.Errorf("%q: Error lost the chain", conn)
			}
		}
	}
}

func TestLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := Logger(slog.New(slog.NewTextHandler(&buf, nil)), secret)
	log = log.With("url", "postgres://u:s3cret@h/db")
	log.Warn("connecting with s3cret", "error", errors.New("bad password s3cret"),
		slog.Group("g", "v", "x s3cret"), "n", 3, "stringer", stringer{})
	out := buf.String()
	if strings.Contains(out, secret) || !strings.Contains(out, "bad password xxxxx") || !strings.Contains(out, "n=3") {
		t.Errorf("logged %q", out)
	}
	if l := slog.Default(); Logger(l) != l {
		t.Error("Logger without secrets is not the logger itself")
	}
}

type stringer struct{}

func (stringer) String() string { return "holds s3cret" }
