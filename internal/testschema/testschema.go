// Package testschema names the throwaway schemas that tests create (a
// prefix, the creation time and a random part) and drops the ones that a
// killed run left behind. The project's test infrastructure
// (internal/testinfra/pgtest), the bench and worker/skiplocktest share it.
// Unlike internal/testinfra, which finds or boots PostgreSQL servers, it
// needs nothing but pgx: users' tests import it through skiplocktest.
package testschema

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Name returns a fresh schema name: prefix, the creation time, and a
// random part, so that DropStale can tell how old it is.
func Name(prefix, random string) string {
	return fmt.Sprintf("%s%d_%s", prefix, time.Now().Unix(), random)
}

// DropStale drops the schemas named by Name with prefix that
// are older than olderThan: the leftovers of runs that were killed before
// their cleanup ran.
func DropStale(ctx context.Context, url, prefix string, olderThan time.Duration) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)", prefix)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range Stale(names, prefix, olderThan) {
		// IF EXISTS: test binaries of several packages, run at once,
		// sweep the same leftovers.
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			return fmt.Errorf("dropping leftover schema %s: %w", name, err)
		}
	}
	return nil
}

// Stale returns the names, among names, that Name made with prefix more
// than olderThan ago; names it did not make are never stale.
func Stale(names []string, prefix string, olderThan time.Duration) []string {
	cutoff := time.Now().Add(-olderThan).Unix()
	var stale []string
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		stamp, _, _ := strings.Cut(rest, "_")
		if created, err := strconv.ParseInt(stamp, 10, 64); err == nil && created < cutoff {
			stale = append(stale, name)
		}
	}
	return stale
}
