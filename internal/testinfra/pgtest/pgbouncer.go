package pgtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncer starts a real PgBouncer in transaction pooling mode in front of
// the server at serverURL, and returns a URL through it whose connections
// use schema (empty: the server's default). It stops when the test ends.
// Each PgBouncer serves one database alias, whose server connections set
// search_path when they open: a transaction pooler cannot carry a client's
// session settings. The URL turns off pgx's statement cache
// (default_query_exec_mode=exec), which a transaction pooler breaks.
func PgBouncer(tb testing.TB, serverURL, schema string) string {
	tb.Helper()
	return StartPgBouncer(tb, serverURL, schema).URL
}

// Bouncer is a PgBouncer started by StartPgBouncer.
type Bouncer struct {
	// URL connects through the PgBouncer, as PgBouncer's returns.
	URL string

	dir    string
	schema string
	user   string
	port   int
	bin    string

	mu       sync.Mutex
	cmd      *exec.Cmd
	restarts int
	served   bool
}

// start runs PgBouncer and returns a channel that receives its exit.
func (b *Bouncer) start() (<-chan error, error) {
	cmd := exec.Command(b.bin, filepath.Join(b.dir, "pgbouncer.ini"))
	if os.Geteuid() == 0 {
		cred, err := unprivileged()
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.cmd = cmd
	b.mu.Unlock()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return exited, nil
}

// supervise restarts PgBouncer each time it exits before stop closes, and
// closes done when it has exited for good. The first start failing to
// listen (a bad configuration) is StartPgBouncer's to report, so
// supervise restarts only a PgBouncer that served.
func (b *Bouncer) supervise(tb testing.TB, exited <-chan error, stop, done chan struct{}) {
	defer close(done)
	for {
		var err error
		select {
		case <-stop:
			<-exited
			return
		case err = <-exited:
		}
		select {
		case <-stop:
			return
		default:
		}
		b.mu.Lock()
		served := b.served
		if served {
			b.restarts++
		}
		b.mu.Unlock()
		if !served {
			return
		}
		fmt.Fprintf(os.Stderr, "pgtest: pgbouncer on port %d exited (%v); restarting it; its log ends:\n%s\n", b.port, err, b.LogTail(800))
		for {
			time.Sleep(200 * time.Millisecond)
			if exited, err = b.start(); err == nil {
				break
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}
}

// Restarts returns how many times PgBouncer exited on its own and was
// restarted, for a test's report.
func (b *Bouncer) Restarts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.restarts
}

// StartPgBouncer is PgBouncer, returning the Bouncer so that a test can
// point it at another server (Repoint).
func StartPgBouncer(tb testing.TB, serverURL, schema string) *Bouncer {
	tb.Helper()
	bin, err := findPgBouncer()
	if err != nil {
		tb.Fatal(err)
	}
	server, err := pgx.ParseConfig(serverURL)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	// PgBouncer refuses to run as root; its files must be the user's too.
	os.Chmod(dir, 0o777)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	b := &Bouncer{dir: dir, schema: schema, user: server.User, port: port}
	ini := fmt.Sprintf(`[databases]
skiplock = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
ignore_startup_parameters = extra_float_digits
server_reset_query =
; After a failed server login PgBouncer refuses logins for this long (15s by
; default): after a database restart that is an outage of its own.
server_login_retry = 1
; The admin console (database pgbouncer), for a test's report (Bouncer.Show).
admin_users = %s
logfile = %s
pidfile = %s
`, b.database(server), port, filepath.Join(dir, "userlist.txt"), server.User, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	files := map[string]string{
		"pgbouncer.ini": ini,
		"userlist.txt":  fmt.Sprintf("%q \"\"\n", server.User),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}

	b.bin = bin
	exited, err := b.start()
	if err != nil {
		tb.Fatalf("pgtest: starting pgbouncer: %v", err)
	}
	// Like a service manager (systemd's Restart=always), restart a PgBouncer
	// that exits on its own. PgBouncer 1.x can abort under a client storm
	// ("bad client state" in disconnect_client); the queue's contract is to
	// ride out its proxy's restart, so a test must not stall on it.
	stop := make(chan struct{})
	done := make(chan struct{})
	go b.supervise(tb, exited, stop, done)
	tb.Cleanup(func() {
		close(stop)
		b.mu.Lock()
		cmd := b.cmd
		b.mu.Unlock()
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})

	Eventually(tb, time.Second, fmt.Sprintf("pgbouncer to listen on port %d", port), func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return true
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			tb.Fatalf("pgtest: pgbouncer exited:\n%s", log)
		default:
		}
		return false
	})
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(server.User),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/skiplock",
		RawQuery: "sslmode=disable&default_query_exec_mode=exec",
	}
	// A first connection proves the path to the server.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		tb.Fatalf("pgtest: connecting through pgbouncer: %v\n%s", err, log)
	}
	conn.Close(ctx)
	b.URL = u.String()
	b.mu.Lock()
	b.served = true
	b.mu.Unlock()
	return b
}

// database is the [databases] entry for server.
func (b *Bouncer) database(server *pgx.ConnConfig) string {
	db := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", server.Host, server.Port, server.Database, server.User)
	if b.schema != "" {
		db += fmt.Sprintf(" connect_query='SET search_path TO %s'", b.schema)
	}
	return db
}

// Repoint sends the PgBouncer's connections to the server at serverURL
// from now on, as an operator does after a failover: it rewrites the
// database entry and reloads (SIGHUP). PgBouncer closes the server
// connections of the old entry as their clients release them; clients stay
// connected.
func (b *Bouncer) Repoint(serverURL string) error {
	server, err := pgx.ParseConfig(serverURL)
	if err != nil {
		return err
	}
	path := filepath.Join(b.dir, "pgbouncer.ini")
	ini, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	head, rest, ok := strings.Cut(string(ini), "\nskiplock = ")
	if !ok {
		return fmt.Errorf("pgtest: no database entry in %s", path)
	}
	_, rest, _ = strings.Cut(rest, "\n")
	ini = []byte(head + "\nskiplock = " + b.database(server) + "\n" + rest)
	if err := os.WriteFile(path, ini, 0o644); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cmd.Process.Signal(syscall.SIGHUP)
}

// Show runs SHOW what (POOLS, CLIENTS, SERVERS...) on the PgBouncer's admin
// console and returns its rows, one a line, for a test's report.
func (b *Bouncer) Show(ctx context.Context, what string) (string, error) {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(b.user),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)),
		Path:     "/pgbouncer",
		RawQuery: "sslmode=disable&default_query_exec_mode=simple_protocol",
	}
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SHOW "+what)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var out strings.Builder
	for i, f := range rows.FieldDescriptions() {
		if i > 0 {
			out.WriteString(" | ")
		}
		out.WriteString(f.Name)
	}
	out.WriteString("\n")
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return out.String(), err
		}
		for i, v := range vals {
			if i > 0 {
				out.WriteString(" | ")
			}
			fmt.Fprint(&out, v)
		}
		out.WriteString("\n")
	}
	return out.String(), rows.Err()
}

// LogTail returns the last n bytes of the PgBouncer's log.
func (b *Bouncer) LogTail(n int) string {
	log, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	if err != nil {
		return err.Error()
	}
	if len(log) > n {
		log = log[len(log)-n:]
	}
	return string(log)
}

// pgbouncerPaths are where distributions and Homebrew install PgBouncer,
// for a PATH without sbin directories (a non-root user's, on Debian).
var pgbouncerPaths = []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer",
	"/opt/homebrew/bin/pgbouncer", "/usr/bin/pgbouncer"}

// findPgBouncer returns PgBouncer's path, or a message saying what to install.
func findPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range pgbouncerPaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("pgtest: the lease-mode and chaos tests need PgBouncer, found neither on PATH nor at %s "+
		"(run .ci/test, which installs it; or apt-get install pgbouncer; macOS: brew install pgbouncer)",
		strings.Join(pgbouncerPaths, ", "))
}

// unprivileged is the user PgBouncer runs as when the tests run as root.
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("pgtest: running as root and found neither a postgres nor a nobody user to run pgbouncer as")
}

// WithStatementCache returns url with pgx's statement cache turned on
// again, for tests of the error a cache gets behind a transaction pooler.
func WithStatementCache(u string) string {
	return strings.Replace(u, "default_query_exec_mode=exec", "default_query_exec_mode=cache_statement", 1)
}
