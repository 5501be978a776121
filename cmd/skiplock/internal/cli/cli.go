// Package cli is the skiplock command: every subcommand, writing to the
// streams of an Env, so that tests run it without a process.
//
//	os.Exit(cli.Run(ctx, os.Args[1:], cli.OSEnv()))
//
// Exit codes: ExitOK (0), ExitError (1: the operation failed or was not
// confirmed), ExitUsage (2: bad flags, arguments or input; nothing was
// done) and ExitPartial (3: the command ran, but some of the tasks it was
// asked to change could not be changed; the output lists them).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/connstr"
	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// Exit codes of Run.
const (
	ExitOK      = 0
	ExitError   = 1
	ExitUsage   = 2
	ExitPartial = 3
)

// ConnectTimeout bounds connecting to the database when the URL sets no
// connect_timeout of its own.
const ConnectTimeout = 5 * time.Second

// Env is what a command runs with.
type Env struct {
	// Stdin answers confirmations and supplies `enqueue NAME -` payloads.
	Stdin io.Reader
	// Stdout receives results: tables, or JSON with --json.
	Stdout io.Writer
	// Stderr receives errors, prompts and progress.
	Stderr io.Writer
	// Getenv reads DATABASE_URL. Nil reads nothing.
	Getenv func(string) string
	// Interactive says that a person can answer prompts on Stdin. Without
	// it, a command that needs a confirmation refuses unless given --yes.
	Interactive bool
	// StderrIsTerminal redraws progress on one line instead of printing a
	// line per update.
	StderrIsTerminal bool
	// ProgressInterval is the least time between two progress reports of
	// bulk work. Defaults to 1s, or 100ms when StderrIsTerminal.
	ProgressInterval time.Duration
}

// OSEnv is the Env of the process: its standard streams and environment.
func OSEnv() Env {
	return Env{
		Stdin:            os.Stdin,
		Stdout:           os.Stdout,
		Stderr:           os.Stderr,
		Getenv:           os.Getenv,
		Interactive:      isTerminal(os.Stdin),
		StderrIsTerminal: isTerminal(os.Stderr),
	}
}

// isTerminal reports whether f is a terminal. A character device is not
// enough: stdin redirected from /dev/null (cron, systemd) is one too, and
// nobody answers a prompt there.
func isTerminal(f *os.File) bool {
	return f != nil && isTerminalFD(f.Fd())
}

// exitError carries an exit code other than ExitError.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErrorf reports bad input: exit code ExitUsage.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// partialErrorf reports tasks that could not be changed: ExitPartial.
func partialErrorf(format string, args ...any) error {
	return &exitError{code: ExitPartial, err: fmt.Errorf(format, args...)}
}

// errNotConfirmed: the person answered no.
var errNotConfirmed = errors.New("not confirmed; nothing was changed")

// app holds what every command shares: the Env and the global flags.
type app struct {
	env Env
	// databaseURLs are the --database-url flags, one a shard of a sharded
	// queue when there are several.
	databaseURLs []string
	json         bool
	// pool is the pool open connected, for the dry runs' transactions.
	pool *pgxpool.Pool
}

// Run runs the skiplock command with args (without the program name) and
// returns its exit code. Errors are one line on env.Stderr.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	a := &app{env: env}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)

	// Every change a command makes is recorded in the audit trail as the
	// OS user's, from the command.
	ctx = queue.WithActor(ctx, queue.Actor{Name: osUser(), Source: queue.SourceCLI})
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitError
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	name := "skiplock"
	if cmd != nil && cmd != root {
		name = strings.TrimPrefix(cmd.CommandPath(), "skiplock ")
		name = "skiplock: " + name
	}
	// Whatever the error quotes, it names no password of the database's
	// URL (pgx masks it in a URL it cannot parse, but only as well as it
	// can tell where the password is).
	msg := connstr.Redact(message(err), append(slices.Clone(a.databaseURLs), env.Getenv("DATABASE_URL"))...)
	fmt.Fprintf(env.Stderr, "%s: %s\n", name, oneLine(msg))
	return code
}

// message words an error for an operator: skiplock's own errors say what to
// run; the others are printed as they are, without the "skiplock: "
// prefixes that wrapped errors repeat.
func message(err error) string {
	var noSchema *queue.NoSchemaError
	var ue *urlError
	switch {
	case errors.As(err, &ue):
		return "--database-url " + ue.url + ": " + message(ue.err)
	case errors.As(err, &noSchema):
		// migrate up cannot help until the schema exists.
		return strings.ReplaceAll(noSchema.Error(), "skiplock: ", "")
	case errors.Is(err, migrations.ErrNotMigrated):
		msg := "schema not migrated: run `skiplock migrate up` with the same --database-url"
		if _, detail, _ := strings.Cut(err.Error(), "(or migrations.Up from Go)"); strings.TrimSpace(detail) != "" {
			msg += " " + strings.TrimSpace(detail)
		}
		return msg
	case errors.Is(err, context.Canceled):
		return "interrupted"
	}
	return strings.ReplaceAll(err.Error(), "skiplock: ", "")
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "skiplock",
		Short: "Operate skiplock work queues on PostgreSQL",
		Long: `skiplock operates the work queues that skiplock workers run: requeue failed
tasks, inspect them, see who holds which task, migrate the schema.

The database comes from --database-url, else the DATABASE_URL environment
variable. Point at a schema with the standard search_path parameter:
postgres://user@host/db?search_path=myschema. Repeat --database-url for
each database of a sharded queue: show, list, stats, requeue, cancel,
run-now, delete, workflow show, batch show and migrate up/status then work
across the shards.

Exit codes: 0 ok; 1 the operation failed or was not confirmed; 2 bad flags,
arguments or input (nothing was done); 3 some of the named tasks could not
be changed (the output lists them).`,
		Example: `  export DATABASE_URL=postgres://app@db.internal:5432/app
  skiplock migrate up
  skiplock stats
  skiplock list --status failed --queue mail
  skiplock requeue --failed --queue mail --since 2h --dry-run
  skiplock requeue 42 43`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		Args:              unknownCommand,
		RunE:              showHelp,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
	}
	root.SetFlagErrorFunc(flagError)
	pf := root.PersistentFlags()
	pf.Var(urlsFlag{&a.databaseURLs}, "database-url", "PostgreSQL URL (default: $DATABASE_URL); add ?search_path=SCHEMA for a schema other than public; repeat for each shard of a sharded queue")
	pf.BoolVar(&a.json, "json", false, "print JSON instead of tables, for scripts")

	root.AddCommand(
		a.requeueCommand(),
		a.cancelCommand(),
		a.runNowCommand(),
		a.deleteCommand(),
		a.purgeCommand(),
		a.listCommand(),
		a.showCommand(),
		a.workflowCommand(),
		a.batchCommand(),
		a.sequenceCommand(),
		a.statsCommand(),
		a.locksCommand(),
		a.workersCommand(),
		a.queueCommand(),
		a.limitCommand(),
		a.schedulesCommand(),
		a.auditCommand(),
		a.enqueueCommand(),
		a.uiCommand(),
		a.migrateCommand(),
		a.versionCommand(),
	)
	return root
}

// unknownCommand rejects arguments to a command that only has
// subcommands, suggesting the closest one.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	hint := ""
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		hint = fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageErrorf("unknown command %q%s; run `%s --help` for the list", args[0], hint, cmd.CommandPath())
}

func showHelp(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q (see `%s --help`)", cmd.Name(), args[0], cmd.CommandPath())
	}
	return nil
}

func flagError(cmd *cobra.Command, err error) error {
	return usageErrorf("%v (see `%s --help`)", err, cmd.CommandPath())
}

// newCommand fills in what every subcommand shares.
func newCommand(c *cobra.Command) *cobra.Command {
	c.SetFlagErrorFunc(flagError)
	return c
}

// connect opens a pool on the database of --database-url or DATABASE_URL.
// It fails fast, in ConnectTimeout, when the server cannot be reached.
func (a *app) connect(ctx context.Context) (*pgxpool.Pool, error) {
	if len(a.databaseURLs) > 1 {
		return nil, usageErrorf("this command works on one database, and %d --database-url are given: pass one (show, list, stats, requeue, cancel, run-now, delete, workflow show, batch show and migrate up/status work on several shards)", len(a.databaseURLs))
	}
	url := ""
	if len(a.databaseURLs) == 1 {
		url = a.databaseURLs[0]
	}
	if url == "" {
		url = a.env.Getenv("DATABASE_URL")
	}
	return a.connectURL(ctx, url)
}

// connectURL opens a pool on the database of url, as connect does.
func (a *app) connectURL(ctx context.Context, url string) (*pgxpool.Pool, error) {
	if url == "" {
		return nil, usageErrorf("no database: pass --database-url or set DATABASE_URL (postgres://user@host:5432/dbname)")
	}
	if scheme, _, ok := strings.Cut(url, "://"); ok && urlScheme.MatchString(scheme) &&
		!strings.EqualFold(scheme, "postgres") && !strings.EqualFold(scheme, "postgresql") {
		// pgx would try it as key=value settings and fail obscurely.
		return nil, usageErrorf("a postgres:// URL is expected, got a %s:// URL: skiplock runs on PostgreSQL only (postgres://user@host:5432/dbname)", clip(scheme, 20))
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageErrorf("invalid database URL: %v", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "skiplock"
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the database: %w", err)
	}
	// connect_timeout bounds each host of a multi-host URL: a dead first
	// host (an old primary after a failover) must leave time for the next.
	hosts := hostList(cfg.ConnConfig)
	pingCtx, cancel := context.WithTimeout(ctx, time.Duration(len(hosts))*cfg.ConnConfig.ConnectTimeout+time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c := cfg.ConnConfig
		return nil, fmt.Errorf("cannot connect to the database at %s (user %s, database %s): %s; check --database-url or DATABASE_URL",
			strings.Join(hosts, ", "), c.User, c.Database, rootCause(err, pingCtx, c.ConnectTimeout))
	}
	return pool, nil
}

// hostList is the distinct host:port pairs a connection tries, in order:
// a multi-host URL's hosts (sslmode=prefer adds a second try of each).
func hostList(c *pgx.ConnConfig) []string {
	hosts := []string{net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))}
	for _, f := range c.Fallbacks {
		if h := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// urlScheme matches a URL's scheme, not key=value settings that contain "://".
var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// rootCause is the innermost error of a failed connection, without the
// repetitions of pgx's report of each attempt.
func rootCause(err error, ctx context.Context, timeout time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return fmt.Sprintf("no answer within %s", timeout)
	}
	return pgerr.ConnectCause(err)
}

// open connects and checks that the schema is migrated to the version this
// build needs.
func (a *app) open(ctx context.Context) (*queue.Client, func(), error) {
	pool, err := a.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	client := queue.New(pool)
	if err := checkSchema(ctx, client); err != nil {
		pool.Close()
		return nil, nil, err
	}
	a.pool = pool
	return client, pool.Close, nil
}

// checkSchema checks that the schema of client is migrated to the version
// this build needs.
func checkSchema(ctx context.Context, client *queue.Client) error {
	info, err := ops.Schema(ctx, client)
	if err != nil {
		return err
	}
	if info.Dirty || info.Version < migrations.Latest {
		dirty := ""
		if info.Dirty {
			dirty = " and dirty (a migration failed part way)"
		}
		return fmt.Errorf("schema %q is at version %d%s, this build needs %d: run `skiplock migrate up`",
			info.Name, info.Version, dirty, migrations.Latest)
	}
	return nil
}

// rolledBack runs fn in a transaction of the pool open connected, then
// rolls it back: a dry run of the statements fn sends.
func (a *app) rolledBack(ctx context.Context, fn func(tx queue.Executor) error) error {
	return rolledBack(ctx, a.pool, fn)
}

// rolledBack runs fn in a transaction of pool, then rolls it back.
func rolledBack(ctx context.Context, pool *pgxpool.Pool, fn func(tx queue.Executor) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // nothing was to be kept
	return fn(tx)
}

// invalidInput reports the first error, if any, of validating a request
// as bad input (ExitUsage): queue checks the ranges, the command does not
// repeat them.
func invalidInput(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return &exitError{code: ExitUsage, err: err}
		}
	}
	return nil
}

// countFlag is a flag that counts something: a whole number, at least 1.
// queue reads 0 as "the default", so an explicit 0 is refused here; queue
// checks the upper bound (invalidInput).
type countFlag int

func (c *countFlag) register(cmd *cobra.Command, name string, value int, usage string) {
	*c = countFlag(value)
	cmd.Flags().Var(c, name, usage)
}

func (c *countFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return errors.New("not a whole number")
	case n < 1:
		return errors.New("must be at least 1")
	}
	*c = countFlag(n)
	return nil
}

func (c *countFlag) String() string { return strconv.Itoa(int(*c)) }
func (c *countFlag) Type() string   { return "int" }
