package devpg

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/user"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/connstr"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Server is a PostgreSQL server that devpg found or started.
type Server struct {
	// URL is a connection string accepted by pgx and libpq, for example
	// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
	URL string
	// Source says where the server came from: "env:NAME" for the
	// environment variable NAME, "local", or "throwaway".
	Source string

	// The fields below are only set for throwaway clusters; Close and
	// Restart need them to drive pg_ctl.
	dir    string // temporary directory holding data/, log and the socket
	binDir string // directory holding initdb and pg_ctl
	port   int
	runAs  *runAs // nil unless we had to drop root privileges
	log    io.Writer
	listen []netip.Prefix // extra addresses (Options.Listen)

	mu     sync.Mutex // serialises Close and Restart
	closed bool
}

// Options controls where Find looks for a server.
type Options struct {
	// EnvVars are tried in order; the first non-empty one is used as-is.
	// If that server does not answer, Find fails instead of trying the
	// next source, so a misconfigured variable is noticed.
	EnvVars []string
	// SkipLocal disables probing 127.0.0.1:5432 and the local socket, so
	// tests can exercise the throwaway path on a machine that has a server.
	SkipLocal bool
	// Log receives one-line progress messages; nil means silent.
	Log io.Writer
	// Listen adds addresses a throwaway cluster listens on besides
	// 127.0.0.1, each with its network, such as "198.18.7.1/30": clients
	// from that network are trusted, as on loopback. For tests that put
	// clients in network namespaces of their own. Setting it implies
	// SkipLocal and ignores EnvVars: only a throwaway cluster can listen
	// there.
	Listen []netip.Prefix
}

const (
	// Local probes are short because a missing local server is the normal
	// case on a fresh machine and we do not want to stall every test run.
	localProbeTimeout = 2 * time.Second
	// A server named explicitly may be remote, so give it longer.
	envProbeTimeout = 5 * time.Second
)

// localSocketDir is where Debian/Ubuntu packages put the server socket;
// peer authentication there often works when TCP needs a password.
const localSocketDir = "/var/run/postgresql"

// Find returns a usable PostgreSQL server: one named by Options.EnvVars,
// else one running locally, else a freshly booted throwaway cluster that
// the caller must Close.
func Find(ctx context.Context, opts Options) (*Server, error) {
	if len(opts.Listen) > 0 {
		opts.EnvVars, opts.SkipLocal = nil, true
	}
	for _, name := range opts.EnvVars {
		v := os.Getenv(name)
		if v == "" {
			continue
		}
		if err := ping(ctx, v, envProbeTimeout); err != nil {
			return nil, fmt.Errorf("devpg: %s is set but its server does not answer: %s", name, connstr.Redact(pgerr.ConnectCause(err), v))
		}
		logf(opts.Log, "devpg: using server from %s", name)
		return &Server{URL: v, Source: "env:" + name}, nil
	}

	if !opts.SkipLocal {
		var errs []string
		for _, c := range localCandidates() {
			if err := ping(ctx, c.url, localProbeTimeout); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %s", c.desc, pgerr.ConnectCause(err)))
				continue
			}
			logf(opts.Log, "devpg: using local PostgreSQL (%s)", c.desc)
			return &Server{URL: c.url, Source: "local"}, nil
		}
		for _, e := range errs {
			logf(opts.Log, "devpg: no local server via %s", e)
		}
	}

	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return bootThrowaway(ctx, opts.Log, opts.Listen)
}

// URLOn is URL with its host replaced by addr, one of Options.Listen.
func (s *Server) URLOn(addr netip.Addr) string {
	u, err := url.Parse(s.URL)
	if err != nil {
		return s.URL
	}
	u.Host = net.JoinHostPort(addr.String(), u.Port())
	return u.String()
}

type candidate struct {
	desc string // for log lines; never contains secrets
	url  string
}

func localCandidates() []candidate {
	cs := []candidate{{
		desc: "postgres@127.0.0.1:5432",
		url:  "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
	}}
	// Skipping a missing socket directory keeps the log free of noise on
	// systems that never had a Debian-packaged server.
	if fi, err := os.Stat(localSocketDir); err == nil && fi.IsDir() {
		// URL form rather than key=value so callers (e.g. migrate) that
		// insist on URLs can still use Server.URL.
		cs = append(cs, candidate{
			desc: "postgres@" + localSocketDir,
			url:  "postgres://postgres@/postgres?host=" + url.QueryEscape(localSocketDir),
		})
	}
	if u, err := user.Current(); err == nil && u.Username != "" && u.Username != "postgres" {
		cs = append(cs, candidate{
			desc: u.Username + "@127.0.0.1:5432",
			url: (&url.URL{
				Scheme:   "postgres",
				User:     url.User(u.Username),
				Host:     "127.0.0.1:5432",
				Path:     "/postgres",
				RawQuery: "sslmode=disable",
			}).String(),
		})
	}
	return cs
}

// ping succeeds only if the server accepts a connection and answers a
// query; accepting TCP is not enough (the server may still be starting,
// or refuse our role).
func ping(ctx context.Context, connString string, timeout time.Duration) error {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = timeout
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return err
	}
	if one != 1 {
		return fmt.Errorf("SELECT 1 returned %d", one)
	}
	return nil
}

// Close stops a throwaway cluster (pg_ctl stop -m immediate, since its data
// is about to be deleted anyway) and removes its directory. It is a no-op
// for servers devpg did not start, and safe to call more than once.
func (s *Server) Close() error {
	if s == nil || s.dir == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.destroy()
}

// Restart stops the throwaway cluster and starts it again on the same port,
// so tests can check that clients survive a server going away. It uses a
// fast (clean) shutdown: with synchronous_commit=off an immediate stop could
// lose recently committed transactions, which would make such tests flaky
// for reasons unrelated to the code under test.
func (s *Server) Restart(ctx context.Context) error {
	if s == nil || s.dir == "" {
		src := "nil server"
		if s != nil {
			src = s.Source
		}
		return fmt.Errorf("devpg: restart needs a throwaway server; for a local server use "+
			"pg_ctlcluster <version> <cluster> restart (Debian/Ubuntu) or pg_ctl -D <datadir> restart "+
			"(this server came from %s)", src)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("devpg: restart after Close")
	}
	logf(s.log, "devpg: restarting throwaway PostgreSQL on port %d", s.port)
	if err := s.stop(ctx, "fast"); err != nil {
		return err
	}
	return s.start(ctx)
}

// Stop stops the throwaway cluster at once (pg_ctl stop -m immediate), as
// a crash would: clients' connections are cut, and new ones refused until
// Start. With the cluster's synchronous_commit=off, a transaction committed
// just before may be lost; run CHECKPOINT first to keep it.
func (s *Server) Stop(ctx context.Context) error {
	if err := s.throwaway("stop"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("devpg: stop after Close")
	}
	logf(s.log, "devpg: stopping throwaway PostgreSQL on port %d (immediate)", s.port)
	return s.stop(ctx, "immediate")
}

// Start starts the throwaway cluster again after Stop, on the same port,
// and returns once it answers queries.
func (s *Server) Start(ctx context.Context) error {
	if err := s.throwaway("start"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("devpg: start after Close")
	}
	logf(s.log, "devpg: starting throwaway PostgreSQL on port %d", s.port)
	return s.start(ctx)
}

// throwaway refuses what only a throwaway cluster can do.
func (s *Server) throwaway(what string) error {
	if s != nil && s.dir != "" {
		return nil
	}
	src := "nil server"
	if s != nil {
		src = s.Source
	}
	return fmt.Errorf("devpg: %s needs a throwaway server (this server came from %s)", what, src)
}

func logf(w io.Writer, format string, args ...any) {
	if w == nil {
		return
	}
	fmt.Fprintf(w, format+"\n", args...)
}
