package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// schemaJSON is what `migrate --json` prints.
type schemaJSON struct {
	Schema   string `json:"schema,omitempty"`
	Version  uint   `json:"version"`
	Previous *uint  `json:"previous_version,omitempty"`
	Latest   uint   `json:"latest"`
	Dirty    bool   `json:"dirty"`
	UpToDate bool   `json:"up_to_date"`
}

// schemaState reads the schema without changing anything (golang-migrate
// would create its version table just to look): version 0 when skiplock's
// tables are missing, an error when the schema itself is.
func schemaState(ctx context.Context, pool *pgxpool.Pool) (ops.SchemaInfo, error) {
	info, err := ops.Schema(ctx, queue.New(pool))
	var noSchema *queue.NoSchemaError
	if errors.Is(err, migrations.ErrNotMigrated) && !errors.As(err, &noSchema) {
		return ops.SchemaInfo{}, nil
	}
	return info, err
}

func (a *app) printSchema(info ops.SchemaInfo, previous *uint, verb string) error {
	out := schemaJSON{
		Schema: info.Name, Version: info.Version, Previous: previous, Latest: migrations.Latest,
		Dirty: info.Dirty, UpToDate: info.Version == migrations.Latest && !info.Dirty,
	}
	if a.json {
		return a.printJSON(out)
	}
	w := a.env.Stdout
	where := "schema " + info.Name
	if info.Name == "" {
		where = "the search_path's first schema"
	}
	switch {
	case verb != "" && previous != nil && *previous == info.Version:
		fmt.Fprintf(w, "Nothing to do: %s is at version %d.\n", where, info.Version)
	case verb != "" && previous != nil:
		fmt.Fprintf(w, "Migrated %s %s from version %d to %d.\n", where, verb, *previous, info.Version)
	case info.Dirty:
		fmt.Fprintf(w, "%s is at version %d and dirty: a migration failed part way; fix it by hand, then run skiplock migrate up.\n", capitalize(where), info.Version)
	case info.Version == 0:
		fmt.Fprintf(w, "Not migrated: skiplock's tables are not in the search_path. This build needs version %d: run skiplock migrate up.\n", migrations.Latest)
	case info.Version < migrations.Latest:
		fmt.Fprintf(w, "%s is at version %d; this build needs %d: run skiplock migrate up.\n", capitalize(where), info.Version, migrations.Latest)
	case info.Version > migrations.Latest:
		fmt.Fprintf(w, "%s is at version %d, newer than this build knows (%d): upgrade skiplock.\n", capitalize(where), info.Version, migrations.Latest)
	default:
		fmt.Fprintf(w, "%s is at version %d: up to date.\n", capitalize(where), info.Version)
	}
	return nil
}

func (a *app) migrateCommand() *cobra.Command {
	c := newCommand(&cobra.Command{
		Use:   "migrate up|down|status|sql|grants",
		Short: "Create, upgrade, drop or check skiplock's tables, print their SQL or a role's grants",
		Long: `Run skiplock's migrations (embedded in this binary) in the first schema of
the search_path. Their version is kept in skiplock_schema_migrations, apart
from an application's own golang-migrate table. To apply them with another
tool instead, print them with skiplock migrate sql. skiplock migrate grants
prints the privileges a producer's, worker's, observer's or operator's
database role needs.`,
		Example: `  skiplock migrate status
  skiplock migrate up
  skiplock migrate up --database-url "postgres://app@db/app?search_path=jobs"
  skiplock migrate down --yes     # drops the tables and every task
  skiplock migrate sql | psql -v ON_ERROR_STOP=1 --single-transaction
  skiplock migrate grants --role app_worker --kind worker`,
		Args: unknownCommand,
		RunE: showHelp,
	})
	c.AddCommand(
		newCommand(&cobra.Command{
			Use:     "up",
			Short:   "Apply every migration not applied yet",
			Example: `  skiplock migrate up`,
			Args:    noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if a.sharded() {
					return a.migrateShards(cmd.Context(), true)
				}
				pool, err := a.connect(cmd.Context())
				if err != nil {
					return err
				}
				defer pool.Close()
				before, err := schemaState(cmd.Context(), pool)
				if err != nil {
					return err
				}
				if err := migrations.Up(cmd.Context(), pool); err != nil {
					return err
				}
				after, err := schemaState(cmd.Context(), pool)
				if err != nil {
					return err
				}
				return a.printSchema(after, &before.Version, "up")
			},
		}),
		a.migrateDownCommand(),
		a.migrateSQLCommand(),
		a.migrateGrantsCommand(),
		newCommand(&cobra.Command{
			Use:   "status",
			Short: "Show the schema's version and whether it is up to date",
			Long: `Show the schema's migration version and the version this build needs.
It changes nothing.`,
			Example: `  skiplock migrate status
  skiplock migrate status --json | jq .up_to_date`,
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if a.sharded() {
					return a.migrateShards(cmd.Context(), false)
				}
				pool, err := a.connect(cmd.Context())
				if err != nil {
					return err
				}
				defer pool.Close()
				info, err := schemaState(cmd.Context(), pool)
				if err != nil {
					return err
				}
				return a.printSchema(info, nil, "")
			},
		}),
	)
	return c
}

func (a *app) migrateDownCommand() *cobra.Command {
	var (
		yes   bool
		steps int
	)
	c := newCommand(&cobra.Command{
		Use:   "down",
		Short: "Revert migrations: all of them (drops skiplock's tables and all tasks), or --steps N",
		Long: `Revert every migration: drop skiplock's tables, and with them every task and
its history. With --steps N, revert only the newest N migrations applied.
Asks for confirmation (--yes skips it; without a terminal it is required).`,
		Example: `  skiplock migrate down
  skiplock migrate down --yes
  skiplock migrate down --steps 1 --yes   # back to the previous version`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("steps") && steps < 1 {
				return usageErrorf("--steps must be at least 1, got %d (without --steps, down reverts every migration)", steps)
			}
			pool, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			before, err := schemaState(cmd.Context(), pool)
			if err != nil {
				return err
			}
			// The versions applied, newest first: what --steps walks back.
			var applied []uint
			for _, v := range migrations.Versions() {
				if v <= before.Version {
					applied = append([]uint{v}, applied...)
				}
			}
			if before.Version > 0 && steps > len(applied) {
				return usageErrorf("--steps %d is more than the %d migrations applied to schema %s (at version %d)",
					steps, len(applied), before.Name, before.Version)
			}
			if before.Version > 0 {
				var q string
				if steps > 0 && steps < len(applied) {
					q = fmt.Sprintf("Revert schema %s from version %d to %d?", before.Name, before.Version, applied[steps])
				} else {
					var tasks int64
					if !before.Dirty {
						if tasks, err = ops.Count(cmd.Context(), queue.New(pool), queue.Filter{}); err != nil {
							return err
						}
					}
					q = fmt.Sprintf("Drop skiplock's tables from schema %s, deleting %s?", before.Name, plural(tasks, "task", "tasks"))
				}
				if err := a.confirm(yes, q); err != nil {
					return err
				}
				if steps > 0 {
					err = migrations.Steps(cmd.Context(), pool, -steps)
				} else {
					err = migrations.Down(cmd.Context(), pool)
				}
				if err != nil {
					return err
				}
			}
			after, err := schemaState(cmd.Context(), pool)
			if err != nil {
				return err
			}
			after.Name = before.Name
			return a.printSchema(after, &before.Version, "down")
		},
	})
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	c.Flags().IntVar(&steps, "steps", 0, "revert only the newest N migrations applied (default: all)")
	return c
}

// migrationJSON is one migration of `migrate sql --json`.
type migrationJSON struct {
	Version   uint   `json:"version"`
	Name      string `json:"name"`
	Direction string `json:"direction"`
	File      string `json:"file"`
	SQL       string `json:"sql"`
}

func (a *app) migrateSQLCommand() *cobra.Command {
	var from, to uint
	c := newCommand(&cobra.Command{
		Use:   "sql [up|down]",
		Short: "Print the migrations' SQL, to apply with another tool",
		Long: `Print the SQL of the migrations embedded in this binary, to apply with psql,
goose, Flyway or your own migration tool. Each migration is headed by a
comment naming its version and file. No database is needed.

--from is the version the schema is at, --to the version to reach. up (the
default) prints the up migrations after --from through --to, oldest first
(defaults: 0 and the latest); down prints the down migrations from --from
back to just above --to, newest first (defaults: the latest and 0). When
--from and --to are equal there is nothing to print, which is no error.

The migrations use no transaction of their own: apply them in one (psql
--single-transaction). From migration 6 on, the schema records its version
itself (skiplock_schema_version()), so workers accept it whichever tool
applied it.`,
		Example: `  skiplock migrate sql | psql -v ON_ERROR_STOP=1 --single-transaction "$PSQL_URL"
  skiplock migrate sql --from 5               # upgrade a schema at version 5
  skiplock migrate sql down --to 5            # revert to version 5
  skiplock migrate sql --json | jq -r '.[].file'`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) > 1:
				return usageErrorf("sql takes one direction, up or down, got %q (see `%s --help`)", args, cmd.CommandPath())
			case len(args) == 1 && args[0] != "up" && args[0] != "down":
				return usageErrorf("sql takes up or down, got %q (see `%s --help`)", args[0], cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			up := len(args) == 0 || args[0] == "up"
			if !cmd.Flags().Changed("from") && !up {
				from = migrations.Latest
			}
			if !cmd.Flags().Changed("to") && up {
				to = migrations.Latest
			}
			versions := migrations.Versions()
			for _, f := range []struct {
				flag string
				v    uint
			}{{"from", from}, {"to", to}} {
				if f.v != 0 && !slices.Contains(versions, f.v) {
					return usageErrorf("--%s %d is not a migration version: this build knows 0 (none) to %d", f.flag, f.v, migrations.Latest)
				}
			}
			switch {
			case from == to:
				// A schema already at the version: an upgrade script's
				// "nothing to do", not a mistake.
				fmt.Fprintf(a.env.Stderr, "skiplock: migrate sql: nothing to print: --from and --to are both %d\n", from)
				if a.json {
					return a.printJSON([]migrationJSON{})
				}
				return nil
			case up && from > to:
				return usageErrorf("up goes to a newer version, got --from %d --to %d (to revert: skiplock migrate sql down --from %d --to %d)", from, to, from, to)
			case !up && from < to:
				return usageErrorf("down goes to an older version, got --from %d --to %d (to upgrade: skiplock migrate sql up --from %d --to %d)", from, to, from, to)
			}

			var out []migrationJSON
			for _, v := range versions {
				if v <= min(from, to) || v > max(from, to) {
					continue
				}
				m := migrationJSON{Version: v, Direction: "up"}
				if !up {
					m.Direction = "down"
				}
				names, err := fs.Glob(migrations.FS(), fmt.Sprintf("%06d_*.%s.sql", v, m.Direction))
				if err != nil || len(names) != 1 {
					return fmt.Errorf("migration %d: want one %s file, found %q", v, m.Direction, names)
				}
				sql, err := fs.ReadFile(migrations.FS(), names[0])
				if err != nil {
					return err
				}
				m.File, m.SQL = names[0], string(sql)
				m.Name = strings.TrimSuffix(strings.SplitN(m.File, "_", 2)[1], "."+m.Direction+".sql")
				out = append(out, m)
			}
			if !up {
				slices.Reverse(out)
			}
			if a.json {
				return a.printJSON(out)
			}
			w := a.env.Stdout
			for i, m := range out {
				if i > 0 {
					fmt.Fprintln(w)
				}
				fmt.Fprintf(w, "-- skiplock migration %d %s, %s (%s)\n", m.Version, m.Name, m.Direction, m.File)
				fmt.Fprintln(w, strings.TrimRight(m.SQL, "\n"))
			}
			return nil
		},
	})
	c.Flags().UintVar(&from, "from", 0, "the version the schema is at (default 0 for up, the latest for down)")
	c.Flags().UintVar(&to, "to", 0, "the version to reach (default the latest for up, 0 for down)")
	return c
}

// grantsJSON is what `migrate grants --json` prints.
type grantsJSON struct {
	Schema     string         `json:"schema"`
	Role       string         `json:"role"`
	Kind       string         `json:"kind"`
	Statements []string       `json:"statements"`
	Optional   []optionalJSON `json:"optional"`
}

type optionalJSON struct {
	SQL string `json:"sql"`
	Why string `json:"why"`
}

func (a *app) migrateGrantsCommand() *cobra.Command {
	var role, kind, schema string
	c := newCommand(&cobra.Command{
		Use:   "grants --role NAME --kind producer|worker|observer|operator",
		Short: "Print the GRANT statements a database role of a kind needs",
		Long: `Print the GRANT statements that give an existing database role the privileges
skiplock needs for one kind of work, and no more:

  producer  enqueue tasks (Go API and the SQL functions skiplock_enqueue,
            skiplock_enqueue_task, skiplock_enqueue_many): unique tasks,
            workflows, sequences
  worker    everything worker.Run does (claims, outcomes, retries, the
            rescuer, periodic schedules, retention, limits, heartbeats);
            a worker also enqueues, as a producer
  observer  the read commands (list, show, stats, locks, queue list, limit
            list, workflow and sequence show) and the dashboard's pages
  operator  an observer that also requeues, cancels, runs now, deletes and
            purges tasks, pauses and resumes queues and sets limits

The schema is the search_path's, as for the other migrate commands (this
reads it from the database), or --schema (no database needed). Grants that
only some setups need are printed commented out, with the reason. Run the
output as the schema's owner; the role itself (CREATE ROLE ... LOGIN) is
yours to create. A role that is two kinds gets both outputs.`,
		Example: `  skiplock migrate grants --role app_worker --kind worker | psql -v ON_ERROR_STOP=1 "$ADMIN_URL"
  skiplock migrate grants --role app_web --kind producer --schema jobs
  skiplock migrate grants --role oncall --kind operator --json | jq -r '.statements[]'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := migrations.ParseRoleKind(kind)
			switch {
			case role == "":
				return usageErrorf("--role is required: the database role to grant to (see `%s --help`)", cmd.CommandPath())
			case kind == "":
				return usageErrorf("--kind is required: producer, worker, observer or operator (see `%s --help`)", cmd.CommandPath())
			case err != nil:
				return usageErrorf("--kind must be producer, worker, observer or operator, got %q", kind)
			case cmd.Flags().Changed("schema") && schema == "":
				return usageErrorf("--schema must name a schema")
			}
			if schema == "" {
				pool, err := a.connect(cmd.Context())
				if err != nil {
					return err
				}
				defer pool.Close()
				info, err := schemaState(cmd.Context(), pool)
				if err != nil {
					return err
				}
				if info.Version == 0 {
					return errors.New("skiplock's tables are not in the search_path: run skiplock migrate up first, or pass --schema")
				}
				schema = info.Name
			}
			stmts, err := migrations.Grants(schema, role, k)
			if err != nil {
				return err
			}
			optional, err := migrations.OptionalGrants(role, k)
			if err != nil {
				return err
			}
			if a.json {
				out := grantsJSON{Schema: schema, Role: role, Kind: kind, Statements: stmts, Optional: []optionalJSON{}}
				for _, o := range optional {
					out.Optional = append(out.Optional, optionalJSON{SQL: o.SQL, Why: o.Why})
				}
				return a.printJSON(out)
			}
			w := a.env.Stdout
			fmt.Fprintf(w, "-- skiplock %s grants for role %s on schema %s (migration %d)\n",
				kind, pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize(), migrations.Latest)
			for _, s := range stmts {
				fmt.Fprintln(w, s)
			}
			for _, o := range optional {
				fmt.Fprintf(w, "\n%s\n-- %s\n", commentLines("Optional, "+o.Why+":", 76), o.SQL)
			}
			return nil
		},
	})
	c.Flags().StringVar(&role, "role", "", "the database role to grant to (required)")
	c.Flags().StringVar(&kind, "kind", "", "what the role does: producer, worker, observer or operator (required)")
	c.Flags().StringVar(&schema, "schema", "", "the schema skiplock's tables are in (default: the search_path's, read from the database)")
	return c
}

// commentLines words s into SQL comment lines of at most width
// characters (a longer word gets a line of its own).
func commentLines(s string, width int) string {
	var lines []string
	line := "--"
	for _, word := range strings.Fields(s) {
		if len(line)+1+len(word) > width && line != "--" {
			lines = append(lines, line)
			line = "--"
		}
		line += " " + word
	}
	return strings.Join(append(lines, line), "\n")
}

// versionJSON is what `version --json` prints.
type versionJSON struct {
	Version       string `json:"version"`
	Library       string `json:"library"` // the github.com/skiplock/skiplock module it was built with
	Commit        string `json:"commit,omitempty"`
	Modified      bool   `json:"modified,omitempty"`
	Go            string `json:"go"`
	SchemaVersion uint   `json:"schema_version"`
}

func (a *app) versionCommand() *cobra.Command {
	return newCommand(&cobra.Command{
		Use:   "version",
		Short: "Print skiplock's version, Go version and the schema version it needs",
		Example: `  skiplock version
  skiplock version --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionJSON{Version: "(unknown)", Library: "(unknown)", Go: runtime.Version(), SchemaVersion: migrations.Latest}
			if info, ok := debug.ReadBuildInfo(); ok {
				// `go install github.com/skiplock/skiplock/cmd/skiplock@v1.2.3`
				// records v1.2.3 here; a build from a checkout, "(devel)".
				v.Version = info.Main.Version
				v.Library = libraryVersion(info)
				for _, s := range info.Settings {
					switch s.Key {
					case "vcs.revision":
						v.Commit = s.Value
					case "vcs.modified":
						v.Modified = s.Value == "true"
					}
				}
			}
			if v.Version == "" {
				v.Version = "(devel)"
			}
			if a.json {
				return a.printJSON(v)
			}
			w := a.env.Stdout
			fmt.Fprintf(w, "skiplock %s\n", v.Version)
			if v.Commit != "" {
				mod := ""
				if v.Modified {
					mod = " (modified)"
				}
				fmt.Fprintf(w, "commit:  %s%s\n", v.Commit, mod)
			}
			fmt.Fprintf(w, "library: github.com/skiplock/skiplock %s\n", v.Library)
			fmt.Fprintf(w, "go:      %s\n", v.Go)
			fmt.Fprintf(w, "schema:  needs migration version %d\n", v.SchemaVersion)
			return nil
		},
	})
}

// libraryVersion is the version of the library module the command was
// built with: the command is a module of its own, so the two can differ.
func libraryVersion(info *debug.BuildInfo) string {
	for _, d := range info.Deps {
		if d.Path != "github.com/skiplock/skiplock" {
			continue
		}
		if d.Replace != nil && d.Replace.Version != "" {
			return d.Replace.Version
		}
		if d.Replace != nil || d.Version == "" || d.Version == "v0.0.0-00010101000000-000000000000" {
			return "(devel)" // the workspace's, or a replace by a directory
		}
		return d.Version
	}
	// Not a dependency: a build in the repository's workspace (go.work),
	// where the library is a main module beside the command.
	if info.Main.Version == "(devel)" {
		return "(devel)"
	}
	return "(unknown)"
}
