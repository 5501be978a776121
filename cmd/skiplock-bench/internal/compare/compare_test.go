package compare

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
)

// TestMain doubles as the systems' processes: the compare starts this test
// binary again with ChildArg, as it starts itself in production.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == ChildArg {
		os.Exit(Command(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	pgtest.Main(m)
}

// TestCompareEverySystem runs the compare once with every system, an -also
// command (skiplock's side again, started as a shell command) and the relay
// without delay, then looks at what each system left in its database. It
// asserts outcomes, never speed.
func TestCompareEverySystem(t *testing.T) {
	const n = 2000
	srv := pgtest.Server(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("cmptest_%d_", os.Getpid())
	admin, err := pgx.Connect(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(ctx) }) // after the drops below
	also := Also{Name: "again", Command: shellQuote(os.Args[0]) + " " + ChildArg + " " + Skiplock}
	dbs := map[string]string{}
	for _, s := range append(Systems, also.Name) {
		dbs[s] = prefix + s
	}
	dbs[also.Name] = prefix + "also_" + also.Name
	t.Cleanup(func() {
		for _, db := range dbs {
			if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
				t.Errorf("dropping %s: %v", db, err)
			}
		}
	})

	var out, progress bytes.Buffer
	rep, err := Run(ctx, Options{
		N:        n,
		Rounds:   1,
		Also:     []Also{also},
		AdminDSN: srv.URL,
		Relay:    true, // RelayDelay 0: the relay alone
		Keep:     true,
		DBPrefix: prefix,
		Self:     []string{os.Args[0]},
		Progress: &progress,
	}, &out)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s\noutput:\n%s", err, progress.String(), out.String())
	}
	t.Logf("output:\n%s", out.String())

	if len(rep.Systems) != len(Systems)+1 {
		t.Fatalf("%d systems reported, want %d", len(rep.Systems), len(Systems)+1)
	}
	if rep.Conditions.Relay != "0s" || !(rep.Conditions.RoundTripMS > 0) || rep.Conditions.Server == "" || rep.Conditions.Autovacuum == "" {
		t.Errorf("conditions: %+v", rep.Conditions)
	}
	if !strings.Contains(out.String(), "through the relay") {
		t.Error("the header does not say the systems went through the relay")
	}
	for _, r := range rep.Systems {
		if !(r.Best > 0) || len(r.Rounds) != 1 || !(r.Rounds[0] > 0) || !(r.Ratio > 0) || len(r.Errors) > 0 {
			t.Errorf("%s: best %v, rounds %v, ratio %v, errors %v", r.Name, r.Best, r.Rounds, r.Ratio, r.Errors)
		}
		if r.Database != dbs[r.Name] {
			t.Errorf("%s: database %q, want %q", r.Name, r.Database, dbs[r.Name])
		}
		if !tableHasRow(out.String(), r.Name) {
			t.Errorf("the table has no row for %s", r.Name)
		}
		// Every system reports the machine's CPU of its work phase on
		// Linux, and the cycle its own and its backends' (the server is
		// local).
		if runtime.GOOS == "linux" && (r.CPU == nil || !(r.CPU.Machine > 0)) {
			t.Errorf("%s: CPU %+v, want the machine's", r.Name, r.CPU)
		}
		if runtime.GOOS == "linux" && r.Name == "cycle" && (r.CPU == nil || !r.CPU.Split) {
			t.Errorf("cycle: CPU %+v, want its own and its backends'", r.CPU)
		}
	}

	// What each system left: all n tasks done, durably.
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	count := func(system, query string) int {
		t.Helper()
		conn, err := pgx.Connect(ctx, withDatabase(u, dbs[system]).String())
		if err != nil {
			t.Fatalf("%s: %v", system, err)
		}
		defer conn.Close(ctx)
		var c int
		if err := conn.QueryRow(ctx, query).Scan(&c); err != nil {
			t.Fatalf("%s: %s: %v", system, query, err)
		}
		return c
	}
	for _, c := range []struct {
		system, query string
		want          int
	}{
		{Skiplock, "SELECT count(*) FROM skiplock_tasks", n},
		{Skiplock, "SELECT count(*) FROM skiplock_tasks WHERE status <> 'completed'", 0},
		{also.Name, "SELECT count(*) FROM skiplock_tasks", n},
		{also.Name, "SELECT count(*) FROM skiplock_tasks WHERE status <> 'completed'", 0},
		{River, "SELECT count(*) FROM river_job WHERE state = 'completed'", n},
		{River, "SELECT count(*) FROM river_job WHERE state <> 'completed'", 0},
		{Graphile, "SELECT count(*) FROM graphile_worker._private_jobs", 0},
		{Cycle, "SELECT count(*) FROM compare_cycle", n},
		{Cycle, "SELECT count(*) FROM compare_cycle WHERE status <> 'completed'", 0},
	} {
		if got := count(c.system, c.query); got != c.want {
			t.Errorf("%s: %s = %d, want %d", c.system, c.query, got, c.want)
		}
	}
}

// tableHasRow reports whether the table has a row for system with a rate.
func tableHasRow(out, system string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && f[0] == system && f[1] != "failed" && strings.HasSuffix(f[len(f)-2], "x") {
			return true
		}
	}
	return false
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func TestParseCPU(t *testing.T) {
	if c := ParseCPU("work_per_s=5\n"); c != nil {
		t.Errorf("no figures: %+v, want nil", c)
	}
	c := ParseCPU("machine_cpu_us_per_task=1.5\nmachine_cpu_us_per_task=20.4\nclient_cpu_us_per_task=3.0 server_cpu_us_per_task=12.25\nwork_per_s=9\n")
	if c == nil || *c != (CPU{Machine: 20.4, Client: 3, Server: 12.25, Split: true}) {
		t.Errorf("ParseCPU = %+v", c)
	}
}

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		out  string
		want float64
		ok   bool
	}{
		{"system=x\nwork_per_s=123\n", 123, true},
		{"work_per_s=1\nwork_per_s=2.5\n", 2.5, true},
		{`{"system":"river","work_per_s": 12700.4,"n":5}`, 12700.4, true},
		{`{"work_per_s":99}` + "\nwork_per_s=7\n", 7, true},
		{"enqueue_per_s=5\n", 0, false},
	} {
		got, ok := ParseRate(c.out)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseRate(%q) = %v, %v; want %v, %v", c.out, got, ok, c.want, c.ok)
		}
	}
}

func TestAdminDSN(t *testing.T) {
	t.Setenv("PEER_ADMIN_DSN", "")
	t.Setenv("DATABASE_URL", "postgres://u:p@db.example:6543/app?sslmode=disable")
	if got, _, _ := AdminDSN("postgres://flag/x"); got != "postgres://flag/x" {
		t.Errorf("flag: %s", got)
	}
	if got, _, _ := AdminDSN(""); got != "postgres://u:p@db.example:6543/postgres?sslmode=disable" {
		t.Errorf("DATABASE_URL's server: %s", got)
	}
	t.Setenv("PEER_ADMIN_DSN", "postgres://peer/admin")
	if got, _, _ := AdminDSN(""); got != "postgres://peer/admin" {
		t.Errorf("PEER_ADMIN_DSN: %s", got)
	}
	t.Setenv("PEER_ADMIN_DSN", "")
	t.Setenv("DATABASE_URL", "")
	if got, _, _ := AdminDSN(""); got != DefaultAdminDSN {
		t.Errorf("default: %s", got)
	}

	u, err := serverURL("host=/var/run/postgresql port=5433 user=postgres dbname=x")
	if err != nil {
		t.Fatal(err)
	}
	if r := throughRelay(withDatabase(u, "compare_river"), "127.0.0.1:4000").String(); r != "postgres://postgres@127.0.0.1:4000/compare_river?sslmode=disable" {
		t.Errorf("through the relay: %s", r)
	}
	if network, addr, err := upstream("host=/var/run/postgresql port=5433 user=postgres"); err != nil || network != "unix" || addr != "/var/run/postgresql/.s.PGSQL.5433" {
		t.Errorf("upstream of a socket: %s %s %v", network, addr, err)
	}
}
