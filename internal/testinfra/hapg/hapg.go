// Package hapg boots a highly available PostgreSQL formation for tests: a
// pg_auto_failover monitor and two data nodes (a primary and a synchronous
// standby) on free ports of 127.0.0.1, from Debian's packages
// postgresql-NN-auto-failover and pg-auto-failover-cli. It runs them as an
// unprivileged user when the tests run as root, fails over on request
// (planned, with `pg_autoctl perform failover`, or by SIGKILL of a node),
// and removes everything, strays of killed test runs included.
//
//	f, err := hapg.Start(ctx, hapg.Options{Log: os.Stderr})
//	if err != nil {
//		t.Fatal(err) // says what to install when the packages are missing
//	}
//	defer f.Close()
//	pool, _ := pgxpool.New(ctx, f.URL()) // multi-host, target_session_attrs=read-write
package hapg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/testinfra/devpg"
)

// ErrNotInstalled is returned by Start when pg_auto_failover is missing.
var ErrNotInstalled = errors.New("hapg: pg_auto_failover is not installed: " +
	"apt-get install postgresql-15-auto-failover pg-auto-failover-cli " +
	"(Debian's packages; the extension's major version must be that of an installed PostgreSQL server)")

// Options tunes a formation. The zero value is usable.
type Options struct {
	// Database is created on the data nodes. Defaults to "skiplock".
	Database string
	// DemoteTimeout is the monitor's primary_demote_timeout: after an
	// unplanned failover the new primary refuses writes for this long, in
	// case the old one is only cut off and still accepts them. Defaults to
	// pg_auto_failover's 30s; tests whose old primary is certainly dead (a
	// SIGKILL) can shorten it. Never shorten it for a planned failover: the
	// old primary drains and hands over its last WAL during that time, and
	// a standby promoted before it has them loses acknowledged commits.
	DemoteTimeout time.Duration
	// Log receives one line per step; nil is silent.
	Log io.Writer
}

// Node is one PostgreSQL instance of the formation and its pg_autoctl.
type Node struct {
	Name string
	Port int

	pgdata string
	logf   string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Formation is a running monitor and two data nodes.
type Formation struct {
	Monitor *Node
	Nodes   []*Node

	dir     string
	binDir  string
	autoctl string
	account *devpg.Account
	opts    Options
	once    sync.Once
}

// Health-check settings of the monitor: pg_auto_failover's defaults take
// about 30s to call a primary dead; these take about 10s. Shorter ones
// misfire on a busy machine: a standby whose keeper reports late is called
// unhealthy, and the primary stops waiting for it (wait_primary), which
// gives up synchronous replication until it is back.
var monitorSettings = []string{
	"pgautofailover.health_check_period = 2000",
	"pgautofailover.health_check_timeout = 3000",
	"pgautofailover.health_check_max_retries = 2",
	"pgautofailover.health_check_retry_delay = 1000",
	"pgautofailover.node_considered_unhealthy_timeout = 10000",
}

const (
	formationName = "default"
	dirPrefix     = "hapg-"
	readyTimeout  = 3 * time.Minute
)

// Start boots a formation and returns once it is healthy: one primary and
// one secondary, synchronously replicated, as the monitor reports them.
func Start(ctx context.Context, opts Options) (f *Formation, err error) {
	if opts.Database == "" {
		opts.Database = "skiplock"
	}
	binDir, autoctl, err := findBinaries()
	if err != nil {
		return nil, err
	}
	account, err := devpg.RunAs()
	if err != nil {
		return nil, err
	}
	sweepStrays()
	dir, err := os.MkdirTemp("/tmp", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("hapg: %w", err)
	}
	f = &Formation{dir: dir, binDir: binDir, autoctl: autoctl, account: account, opts: opts}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o755)
	if err := account.Chown(dir); err != nil {
		return nil, fmt.Errorf("hapg: handing %s to %s: %w", dir, account.Name, err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	f.Monitor = &Node{Name: "monitor", Port: ports[0], pgdata: filepath.Join(dir, "monitor")}
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("node%d", i)
		f.Nodes = append(f.Nodes, &Node{Name: name, Port: ports[i], pgdata: filepath.Join(dir, name)})
	}
	began := time.Now()
	f.logf("hapg: booting a pg_auto_failover formation in %s (monitor :%d, data nodes :%d and :%d)%s",
		dir, ports[0], ports[1], ports[2], map[bool]string{true: " as user " + nameOf(account), false: ""}[account != nil])

	// The monitor.
	if err := f.initdb(ctx, f.Monitor); err != nil {
		return nil, err
	}
	if err := f.autoctlRun(ctx, "create", "monitor", "--pgdata", f.Monitor.pgdata, "--pgport", strconv.Itoa(f.Monitor.Port),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--ssl-mode", "disable"); err != nil {
		return nil, err
	}
	// The monitor has no --listen: keep it on loopback.
	if err := f.autoctlRun(ctx, "config", "set", "--pgdata", f.Monitor.pgdata, "postgresql.listen_addresses", "127.0.0.1"); err != nil {
		return nil, err
	}
	if err := f.start(f.Monitor); err != nil {
		return nil, err
	}
	if err := f.waitFor(ctx, "the monitor to answer", func(ctx context.Context) error {
		return f.exec(ctx, f.MonitorURL(), "SELECT 1")
	}); err != nil {
		return nil, err
	}
	settings := monitorSettings
	if opts.DemoteTimeout > 0 {
		settings = append(settings, fmt.Sprintf("pgautofailover.primary_demote_timeout = %d", opts.DemoteTimeout.Milliseconds()))
	}
	for _, s := range settings {
		name, value, _ := strings.Cut(s, " = ")
		if err := f.exec(ctx, f.monitorAdminURL(), fmt.Sprintf("ALTER SYSTEM SET %s = %s", name, value)); err != nil {
			return nil, err
		}
	}
	if err := f.exec(ctx, f.monitorAdminURL(), "SELECT pg_reload_conf()"); err != nil {
		return nil, err
	}

	// The first data node becomes the primary, the second its standby
	// (pg_basebackup from the first, which carries the tuning along).
	if err := f.initdb(ctx, f.Nodes[0]); err != nil {
		return nil, err
	}
	for _, n := range f.Nodes {
		if err := f.autoctlRun(ctx, "create", "postgres", "--pgdata", n.pgdata, "--pgport", strconv.Itoa(n.Port),
			"--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--name", n.Name, "--dbname", opts.Database,
			"--auth", "trust", "--no-ssl", "--ssl-mode", "disable", "--monitor", f.MonitorURL()); err != nil {
			return nil, err
		}
		if err := f.start(n); err != nil {
			return nil, err
		}
		if n == f.Nodes[0] {
			if err := f.waitFor(ctx, n.Name+" to be writable", func(ctx context.Context) error {
				return f.exec(ctx, f.NodeURL(n)+"&target_session_attrs=read-write", "SELECT 1")
			}); err != nil {
				return nil, err
			}
		}
	}
	if err := f.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	f.logf("hapg: formation healthy in %s", time.Since(began).Round(time.Millisecond))
	return f, nil
}

// URL is a multi-host URL of the formation's database that connects to
// whichever node is the writable primary.
func (f *Formation) URL() string {
	hosts := make([]string, len(f.Nodes))
	for i, n := range f.Nodes {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port))
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write",
		strings.Join(hosts, ","), f.opts.Database)
}

// NodeURL is the URL of one node's database, whatever its role.
func (f *Formation) NodeURL(n *Node) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.Port, f.opts.Database)
}

// MonitorURL is the monitor's database, as pg_autoctl connects to it.
func (f *Formation) MonitorURL() string {
	return fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.Monitor.Port)
}

func (f *Formation) monitorAdminURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.Monitor.Port)
}

// NodeState is a data node as the monitor sees it.
type NodeState struct {
	Name, Reported, Assigned string
	Port                     int
}

// State returns the monitor's view of the data nodes.
func (f *Formation) State(ctx context.Context) ([]NodeState, error) {
	conn, err := connect(ctx, f.MonitorURL())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT nodename, nodeport, current_group_state::text, assigned_group_state::text
		FROM pgautofailover.current_state($1)`, formationName)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (NodeState, error) {
		var s NodeState
		return s, r.Scan(&s.Name, &s.Port, &s.Reported, &s.Assigned)
	})
}

// WaitHealthy waits until the monitor reports one primary and one
// secondary, each in the state it was assigned.
func (f *Formation) WaitHealthy(ctx context.Context) error {
	return f.waitFor(ctx, "a healthy formation (primary and secondary)", func(ctx context.Context) error {
		states, err := f.State(ctx)
		if err != nil {
			return err
		}
		roles := map[string]int{}
		for _, s := range states {
			if s.Reported != s.Assigned {
				return fmt.Errorf("%s is %s, assigned %s", s.Name, s.Reported, s.Assigned)
			}
			roles[s.Reported]++
		}
		if roles["primary"] != 1 || roles["secondary"] != len(f.Nodes)-1 {
			return fmt.Errorf("states %v", states)
		}
		return nil
	})
}

// Primary returns the node that accepts writes now, without waiting.
func (f *Formation) Primary(ctx context.Context) (*Node, error) {
	for _, n := range f.Nodes {
		if f.exec(ctx, f.NodeURL(n)+"&target_session_attrs=read-write&connect_timeout=2", "SELECT 1") == nil {
			return n, nil
		}
	}
	return nil, errors.New("hapg: no node accepts writes")
}

// Failover starts a planned failover, as `pg_autoctl perform failover`
// does, and returns at once: the caller watches the formation
// (WaitWritable). It calls the monitor's function itself because the
// command, even with --wait 0, returns only once the new primary is
// "primary" (measured: 11.6 s after the first state change), which made a
// failover look that much longer to anyone timing it from the return.
func (f *Formation) Failover(ctx context.Context) error {
	return f.exec(ctx, f.MonitorURL(), fmt.Sprintf("SELECT pgautofailover.perform_failover('%s', 0)", formationName))
}

// Kill SIGKILLs a data node: its pg_autoctl (which would restart
// PostgreSQL otherwise), its postmaster and every backend, as the loss of
// its machine would. The monitor then promotes the standby.
func (f *Formation) Kill(n *Node) error {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("hapg: %s is not running", n.Name)
	}
	// The postmaster first, then the process group of pg_autoctl, which
	// holds the postmaster and its backends too.
	if pid := postmasterPID(n.pgdata); pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("hapg: killing %s: %w", n.Name, err)
	}
	<-exited
	// Backends notice their postmaster's death by themselves; wait until
	// none is left holding the port, so the node is really gone.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)), time.Second)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
	n.mu.Lock()
	n.cmd = nil
	n.mu.Unlock()
	f.logf("hapg: killed %s (SIGKILL of pg_autoctl and postgres)", n.Name)
	return nil
}

// Rejoin starts a killed node's pg_autoctl again: it rejoins the formation
// as a standby of the new primary (pg_rewind when needed).
func (f *Formation) Rejoin(n *Node) error { return f.start(n) }

// writeProbeTimeout bounds one commit of WaitWritable's probe. While the
// old primary rejoins as a standby, commits wait for it to confirm them,
// which on a busy machine takes seconds: a short bound would call the
// node unwritable while clients are committing on it.
const writeProbeTimeout = 10 * time.Second

// WaitWritable waits until n commits a write (out of recovery,
// transaction_read_only off: pg_auto_failover keeps a promoted node
// read-only until the old primary is known demoted; and a commit that
// comes back within writeProbeTimeout) and returns when the first such
// write was sent. It keeps one
// session across the promotion rather than connecting each time: on a busy
// machine a new connection can take longer than the step it would time.
func (f *Formation) WaitWritable(ctx context.Context, n *Node) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	var last error
	for {
		if conn == nil {
			conn, last = connect(ctx, f.NodeURL(n))
		}
		if conn != nil {
			var recovery bool
			var readOnly string
			qctx, qcancel := context.WithTimeout(ctx, writeProbeTimeout)
			last = conn.QueryRow(qctx, "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')").Scan(&recovery, &readOnly)
			if last == nil && !recovery && readOnly == "off" {
				// A transaction ID makes the commit a real one, which waits
				// for the synchronous standbys.
				var xid string
				sent := time.Now()
				if last = conn.QueryRow(qctx, "SELECT pg_current_xact_id()::text").Scan(&xid); last == nil {
					qcancel()
					// The node took the write when it was sent; the commit
					// may have waited for a standby's confirmation.
					return sent, nil
				}
			} else if last == nil {
				last = fmt.Errorf("in recovery: %t, transaction_read_only: %s", recovery, readOnly)
			}
			qcancel()
			if conn.IsClosed() || errors.Is(last, context.DeadlineExceeded) {
				conn.Close(context.Background())
				conn = nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("hapg: waiting for %s to accept writes: %w (last: %v)", n.Name, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close stops every process of the formation and removes its directory.
// It is safe to call more than once.
func (f *Formation) Close() {
	f.once.Do(func() {
		nodes := append([]*Node{}, f.Nodes...)
		if f.Monitor != nil {
			nodes = append(nodes, f.Monitor)
		}
		for _, n := range nodes {
			n.stop()
		}
		killStrays(f.dir)
		os.RemoveAll(f.dir)
	})
}

// Log returns the end of a node's pg_autoctl log, for failure reports.
func (f *Formation) Log(n *Node) string {
	b, _ := os.ReadFile(n.logf)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (n *Node) stop() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if pid := postmasterPID(n.pgdata); pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// initdb creates a data directory with the formation's settings in
// postgresql.auto.conf, which is read after pg_auto_failover's own tuning
// (sized for a dedicated machine: gigabytes of shared_buffers).
func (f *Formation) initdb(ctx context.Context, n *Node) error {
	cmd := exec.CommandContext(ctx, filepath.Join(f.binDir, "initdb"), "-D", n.pgdata, "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	if out, err := f.run(cmd); err != nil {
		return fmt.Errorf("hapg: initdb %s: %v\n%s", n.Name, err, out)
	}
	conf := fmt.Sprintf(`
unix_socket_directories = '%s'
listen_addresses = '127.0.0.1'
shared_buffers = '32MB'
max_connections = 200
fsync = off
`, f.dir)
	file, err := os.OpenFile(filepath.Join(n.pgdata, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("hapg: %w", err)
	}
	defer file.Close()
	_, err = file.WriteString(conf)
	return err
}

func (f *Formation) autoctlRun(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.autoctl, args...)
	if out, err := f.run(cmd); err != nil {
		return fmt.Errorf("hapg: pg_autoctl %s: %v\n%s", strings.Join(args[:min(2, len(args))], " "), err, tailOf(out))
	}
	return nil
}

// run runs a short command as the formation's user, in its environment.
func (f *Formation) run(cmd *exec.Cmd) ([]byte, error) {
	f.prepare(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.Bytes(), err
}

func (f *Formation) prepare(cmd *exec.Cmd) {
	cmd.Dir = f.dir
	cmd.Env = append(os.Environ(),
		"XDG_CONFIG_HOME="+filepath.Join(f.dir, "config"),
		"XDG_DATA_HOME="+filepath.Join(f.dir, "data"),
		"XDG_RUNTIME_DIR="+filepath.Join(f.dir, "run"),
		"PG_CONFIG="+filepath.Join(f.binDir, "pg_config"),
		"PATH="+f.binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"PGHOST="+f.dir,
		"HOME="+f.dir,
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	f.account.Apply(cmd)
}

// start runs `pg_autoctl run` for a node in its own process group, so that
// a kill reaches the postgres it supervises too.
func (f *Formation) start(n *Node) error {
	n.logf = filepath.Join(f.dir, n.Name+".log")
	logFile, err := os.OpenFile(n.logf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(f.autoctl, "run", "--pgdata", n.pgdata)
	f.prepare(cmd)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("hapg: starting pg_autoctl for %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	pgids, _ := os.OpenFile(filepath.Join(f.dir, "pgids"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if pgids != nil {
		fmt.Fprintln(pgids, cmd.Process.Pid)
		pgids.Close()
	}
	return nil
}

// waitFor polls check until it succeeds, the formation's ready timeout
// passes, or ctx ends.
func (f *Formation) waitFor(ctx context.Context, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hapg: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (f *Formation) exec(ctx context.Context, url, sql string) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	return pgx.ConnectConfig(ctx, cfg)
}

func (f *Formation) logf(format string, args ...any) {
	if f.opts.Log != nil {
		fmt.Fprintf(f.opts.Log, format+"\n", args...)
	}
}

// Where Debian's packages put pg_autoctl and PostgreSQL: variables so that
// a test can point them at an empty directory.
var (
	autoctlPath = "/usr/bin/pg_autoctl"
	debianRoot  = "/usr"
)

// findBinaries finds pg_autoctl and the server binaries of the major
// version whose pgautofailover extension is installed.
func findBinaries() (binDir, autoctl string, err error) {
	autoctl, err = exec.LookPath("pg_autoctl")
	if err != nil {
		if _, serr := os.Stat(autoctlPath); serr != nil {
			return "", "", ErrNotInstalled
		}
		autoctl = autoctlPath
	}
	controls, _ := filepath.Glob(filepath.Join(debianRoot, "share/postgresql/*/extension/pgautofailover.control"))
	sort.Sort(sort.Reverse(sort.StringSlice(controls)))
	for _, c := range controls {
		major := filepath.Base(filepath.Dir(filepath.Dir(c)))
		dir := filepath.Join(debianRoot, "lib/postgresql", major, "bin")
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, autoctl, nil
		}
	}
	return "", "", ErrNotInstalled
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("hapg: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func postmasterPID(pgdata string) int {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// sweepStrays removes the formations of test processes that died without
// closing them (a killed `go test`), with every process they left.
func sweepStrays() {
	dirs, _ := filepath.Glob(filepath.Join("/tmp", dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner == os.Getpid() || syscall.Kill(owner, 0) == nil {
			continue
		}
		killStrays(dir)
		os.RemoveAll(dir)
	}
}

// killStrays kills what a formation directory's records name, if it is
// still one of ours: pg_autoctl process groups and postmasters.
func killStrays(dir string) {
	if b, err := os.ReadFile(filepath.Join(dir, "pgids")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if pgid, err := strconv.Atoi(f); err == nil && pgid > 1 && isOurs(pgid, dir) {
				syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
	}
	pids, _ := filepath.Glob(filepath.Join(dir, "*", "postmaster.pid"))
	for _, p := range pids {
		if pid := postmasterPID(filepath.Dir(p)); pid > 1 && isOurs(pid, dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// isOurs reports whether pid's command line names dir: a pid recorded long
// ago may belong to another process now.
func isOurs(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(b, []byte(dir))
}

func nameOf(a *devpg.Account) string {
	if a == nil {
		return ""
	}
	return a.Name
}

func tailOf(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	return strings.Join(lines, "\n")
}

// Event is one of the monitor's events: a node's reported state, the goal
// state the monitor assigned it, and why.
type Event struct {
	At                          time.Time
	Node, Reported, Goal, About string
}

// EventsSince returns the monitor's events from since on, oldest first.
func (f *Formation) EventsSince(ctx context.Context, since time.Time) ([]Event, error) {
	conn, err := connect(ctx, f.MonitorURL())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT eventtime, nodename, reportedstate::text, goalstate::text, description
		FROM pgautofailover.event WHERE eventtime >= $1 ORDER BY eventid`, since)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		return e, r.Scan(&e.At, &e.Node, &e.Reported, &e.Goal, &e.About)
	})
}

// Events returns the monitor's last n events, oldest first, one line each
// with its time: what a failure report or a timing question needs.
func (f *Formation) Events(ctx context.Context, n int) (string, error) {
	conn, err := connect(ctx, f.MonitorURL())
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT to_char(eventtime, 'HH24:MI:SS.MS'), nodename, reportedstate::text, goalstate::text, description
		FROM (SELECT * FROM pgautofailover.event ORDER BY eventid DESC LIMIT $1) e ORDER BY eventid`, n)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for rows.Next() {
		var at, node, reported, goal, desc string
		if err := rows.Scan(&at, &node, &reported, &goal, &desc); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s %s %s -> %s: %s\n", at, node, reported, goal, desc)
	}
	return b.String(), rows.Err()
}
