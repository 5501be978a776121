package devpg

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// errNoPostgres is returned when there is nothing to connect to and nothing
// to boot; its text is the whole fix, because it is what a newcomer sees
// on their first "go test".
var errNoPostgres = errors.New("devpg: no PostgreSQL found: set DATABASE_URL to a server, " +
	"start one on 127.0.0.1:5432, or install the server binaries " +
	"(Debian/Ubuntu: sudo apt-get install postgresql; Fedora: sudo dnf install postgresql-server; " +
	"macOS: brew install postgresql)")

// binDirGlobs lists where server binaries live when they are not on PATH
// (Debian never puts initdb on PATH). It is a variable so tests can point
// it at an empty directory.
var binDirGlobs = []string{
	"/usr/lib/postgresql/*/bin",         // Debian/Ubuntu
	"/usr/pgsql-*/bin",                  // PGDG RPMs
	"/usr/local/pgsql/bin",              // default prefix of a source build
	"/opt/homebrew/bin",                 // Homebrew on Apple silicon
	"/opt/homebrew/opt/postgresql*/bin", // keg-only versioned formulae
	"/usr/local/opt/postgresql*/bin",    // Homebrew on Intel
}

const (
	// pg_ctl's own wait; generous because CI machines can be slow.
	pgctlTimeoutSeconds = 60
	// Our own readiness poll after pg_ctl says the server is up.
	readyTimeout = 30 * time.Second
	readyPoll    = 50 * time.Millisecond
	// A free port can be taken between our probe and the server's bind.
	portAttempts = 3
)

// findBinaries returns a directory holding both initdb and pg_ctl; they
// must come from the same installation or pg_ctl may start a postgres of a
// different major version than the one that ran initdb.
func findBinaries() (string, error) {
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		// Relative PATH entries would make the result depend on the cwd.
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		if hasServerBinaries(d) {
			return d, nil
		}
	}
	for _, g := range binDirGlobs {
		matches, _ := filepath.Glob(g)
		// Prefer the newest major version when several are installed.
		slices.SortStableFunc(matches, func(a, b string) int {
			return -compareVersions(versionOf(a), versionOf(b))
		})
		for _, m := range matches {
			if hasServerBinaries(m) {
				return m, nil
			}
		}
	}
	return "", errNoPostgres
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl"} {
		fi, err := os.Stat(filepath.Join(dir, exe(name)))
		if err != nil || !fi.Mode().IsRegular() {
			return false
		}
		if runtime.GOOS != "windows" && fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

func exe(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}

var digitsRE = regexp.MustCompile(`[0-9]+`)

// versionOf extracts the numbers in a path such as
// /usr/lib/postgresql/9.6/bin -> [9 6]; paths without numbers sort last.
func versionOf(path string) []int {
	var v []int
	for _, s := range digitsRE.FindAllString(path, -1) {
		n, _ := strconv.Atoi(s)
		v = append(v, n)
	}
	return v
}

func compareVersions(a, b []int) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := cmp.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

var pgVersionRE = regexp.MustCompile(`\(PostgreSQL\) ([0-9]+)`)

// serverMajor is only used for the log line, so failure is not an error.
func serverMajor(ctx context.Context, binDir string) string {
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, exe("pg_ctl")), "--version").Output()
	if err != nil {
		return ""
	}
	if m := pgVersionRE.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

func bootThrowaway(ctx context.Context, logw io.Writer, listen []netip.Prefix) (srv *Server, err error) {
	binDir, err := findBinaries()
	if err != nil {
		return nil, err
	}
	ra, err := lookupRunAs()
	if err != nil {
		return nil, err
	}

	parent := "" // os.TempDir()
	if ra != nil && !traversableBy(os.TempDir(), ra.uid) {
		// A private TMPDIR (e.g. /root/tmp) cannot be entered by the
		// unprivileged server user; /tmp always can.
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "devpg-")
	if err != nil {
		return nil, fmt.Errorf("devpg: %w", err)
	}
	s := &Server{Source: "throwaway", dir: dir, binDir: binDir, runAs: ra, log: logw, listen: listen}
	defer func() {
		if err != nil {
			_ = s.destroy()
		}
	}()
	if ra != nil {
		// MkdirTemp already uses 0700; the chown is what lets the server
		// user in while keeping everyone else out.
		if err := chownAll(dir, ra.uid, ra.gid); err != nil {
			return nil, fmt.Errorf("devpg: handing %s to user %s: %w", dir, ra.name, err)
		}
	}

	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s.setPort(port)

	version := serverMajor(ctx, binDir)
	if version != "" {
		version = " " + version
	}
	as := ""
	if ra != nil {
		as = fmt.Sprintf(" as user %s (initdb refuses to run as root)", ra.name)
	}
	logf(logw, "devpg: booting throwaway PostgreSQL%s in %s on port %d%s", version, dir, port, as)
	start := time.Now()

	// --locale=C: initdb fails outright if LANG names a locale that is not
	// generated on this machine (common in containers), and C collation
	// keeps ORDER BY results identical across machines.
	out, err := s.run(ctx, "initdb", "-D", s.dataDir(), "-U", "postgres", "--auth=trust",
		"--no-sync", "-E", "UTF8", "--locale=C")
	if err != nil {
		return nil, fmt.Errorf("devpg: initdb failed: %v\n%s", err, bytes.TrimSpace(out))
	}
	if len(listen) > 0 {
		if err := s.trust(listen); err != nil {
			return nil, err
		}
	}

	for attempt := 1; ; attempt++ {
		err = s.start(ctx)
		if err == nil {
			break
		}
		if attempt >= portAttempts || ctx.Err() != nil || !strings.Contains(s.logTail(), "could not bind") {
			return nil, err
		}
		port, perr := freePort()
		if perr != nil {
			return nil, perr
		}
		logf(logw, "devpg: port %d was taken, retrying on port %d", s.port, port)
		s.setPort(port)
	}
	logf(logw, "devpg: throwaway PostgreSQL ready in %s", time.Since(start).Round(time.Millisecond))
	return s, nil
}

// trust lets clients of the extra networks in, as initdb --auth=trust lets
// loopback clients in.
func (s *Server) trust(listen []netip.Prefix) error {
	f, err := os.OpenFile(filepath.Join(s.dataDir(), "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("devpg: %w", err)
	}
	for _, p := range listen {
		fmt.Fprintf(f, "host all all %s trust\n", p.Masked())
	}
	return f.Close()
}

func (s *Server) setPort(port int) {
	s.port = port
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logFile() string { return filepath.Join(s.dir, "log") }

// start launches the postmaster and returns once it answers queries.
func (s *Server) start(ctx context.Context) error {
	// The settings trade durability for speed: the data dies with the test.
	// The socket goes in our private dir so we never collide with (or need
	// write access to) /var/run/postgresql.
	addrs := []string{"127.0.0.1"}
	for _, p := range s.listen {
		addrs = append(addrs, p.Addr().String())
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=%s -c fsync=off "+
		"-c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
		s.port, shellQuote(s.dir), strings.Join(addrs, ","))
	out, err := s.run(ctx, "pg_ctl", "-D", s.dataDir(), "-l", s.logFile(), "-w",
		"-t", strconv.Itoa(pgctlTimeoutSeconds), "-o", opts, "start")
	if err != nil {
		return fmt.Errorf("devpg: pg_ctl start failed: %v\n%s\nserver log (%s) ends with:\n%s",
			err, bytes.TrimSpace(out), s.logFile(), s.logTail())
	}
	if err := waitReady(ctx, s.URL); err != nil {
		return fmt.Errorf("devpg: server on port %d did not become ready: %v\nserver log (%s) ends with:\n%s",
			s.port, err, s.logFile(), s.logTail())
	}
	return nil
}

// stop shuts the postmaster down; a server that is already gone counts as
// stopped so that cleanup after a failed start or restart still works.
func (s *Server) stop(ctx context.Context, mode string) error {
	out, err := s.run(ctx, "pg_ctl", "-D", s.dataDir(), "-m", mode, "-w",
		"-t", strconv.Itoa(pgctlTimeoutSeconds), "stop")
	if err == nil {
		return nil
	}
	if _, statErr := os.Stat(filepath.Join(s.dataDir(), "postmaster.pid")); errors.Is(statErr, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("devpg: pg_ctl stop failed: %v\n%s", err, bytes.TrimSpace(out))
}

// destroy stops the server and deletes everything; callers hold s.mu or
// own s exclusively.
func (s *Server) destroy() error {
	// Not the caller's context: cleanup must run even when the test's
	// context has already been cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), (pgctlTimeoutSeconds+10)*time.Second)
	defer cancel()
	var stopErr error
	if _, err := os.Stat(s.dataDir()); err == nil {
		stopErr = s.stop(ctx, "immediate")
	}
	rmErr := os.RemoveAll(s.dir)
	if rmErr != nil {
		rmErr = fmt.Errorf("devpg: removing %s: %w", s.dir, rmErr)
	}
	return errors.Join(stopErr, rmErr)
}

func (s *Server) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, exe(name)), args...)
	// The cwd must be enterable by the server user; ours may be /root.
	cmd.Dir = s.dir
	// pg_ctl leaves a daemon behind; if it ever kept our output pipe open,
	// Wait would block forever without this.
	cmd.WaitDelay = 5 * time.Second
	s.runAs.apply(cmd)
	return cmd.CombinedOutput()
}

// waitReady polls until the server answers a query. pg_ctl -w already
// waits, but it only checks that the postmaster accepts connections.
func waitReady(ctx context.Context, connString string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		err := ping(ctx, connString, localProbeTimeout)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// freePort asks the kernel for an unused port. Another process could grab
// it before the server binds; bootThrowaway retries in that case.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("devpg: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logTail returns the end of the server log, which is where the real
// reason for a failed start (bad setting, port in use, shm limits) is.
func (s *Server) logTail() string {
	const maxBytes, maxLines = 4096, 30
	b, err := os.ReadFile(s.logFile())
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}

// shellQuote protects a path inside pg_ctl -o, which pg_ctl pastes into a
// shell command line.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// traversableBy reports whether uid can reach dir, checking only the
// owner and "other" bits: enough to decide whether to fall back to /tmp.
func traversableBy(dir string, uid int) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return false
		}
		if fi.Mode().Perm()&0o001 == 0 && !(ownerOf(fi) == uid && fi.Mode().Perm()&0o100 != 0) {
			return false
		}
		if parent := filepath.Dir(p); parent == p {
			return true
		}
	}
}

func chownAll(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
