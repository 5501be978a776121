package cli

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

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
// tables are missing.
func schemaState(ctx context.Context, pool *pgxpool.Pool) (queue.SchemaInfo, error) {
	info, err := queue.New(pool).Schema(ctx)
	if errors.Is(err, queue.ErrNotMigrated) {
		return queue.SchemaInfo{}, nil
	}
	return info, err
}

func (a *app) printSchema(info queue.SchemaInfo, previous *uint, verb string) error {
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
		Use:   "migrate up|down|status",
		Short: "Create, upgrade, drop or check skiplock's tables",
		Long: `Run skiplock's migrations (embedded in this binary) in the first schema of
the search_path. Their version is kept in skiplock_schema_migrations, apart
from an application's own golang-migrate table.`,
		Example: `  skiplock migrate status
  skiplock migrate up
  skiplock migrate up --database-url "postgres://app@db/app?search_path=jobs"
  skiplock migrate down --yes     # drops the tables and every task`,
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
		newCommand(&cobra.Command{
			Use:   "status",
			Short: "Show the schema's version and whether it is up to date",
			Long: `Show the schema's migration version and the version this build needs.
It changes nothing.`,
			Example: `  skiplock migrate status
  skiplock migrate status --json | jq .up_to_date`,
			Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
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
	var yes bool
	c := newCommand(&cobra.Command{
		Use:   "down",
		Short: "Revert every migration: drops skiplock's tables and all tasks",
		Long: `Revert every migration: drop skiplock's tables, and with them every task and
its history. Asks for confirmation (--yes skips it; without a terminal it
is required).`,
		Example: `  skiplock migrate down
  skiplock migrate down --yes`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			before, err := schemaState(cmd.Context(), pool)
			if err != nil {
				return err
			}
			if before.Version > 0 {
				var tasks int64
				if !before.Dirty {
					if tasks, err = queue.New(pool).Count(cmd.Context(), queue.ListFilter{}); err != nil {
						return err
					}
				}
				q := fmt.Sprintf("Drop skiplock's tables from schema %s, deleting %s?", before.Name, plural(tasks, "task", "tasks"))
				if err := a.confirm(yes, q); err != nil {
					return err
				}
				if err := migrations.Down(cmd.Context(), pool); err != nil {
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
	return c
}

// versionJSON is what `version --json` prints.
type versionJSON struct {
	Version       string `json:"version"`
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
			v := versionJSON{Version: "(unknown)", Go: runtime.Version(), SchemaVersion: migrations.Latest}
			if info, ok := debug.ReadBuildInfo(); ok {
				v.Version = info.Main.Version
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
			fmt.Fprintf(w, "go:      %s\n", v.Go)
			fmt.Fprintf(w, "schema:  needs migration version %d\n", v.SchemaVersion)
			return nil
		},
	})
}
