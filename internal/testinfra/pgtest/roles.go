package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testschema"
	"github.com/skiplock/skiplock/migrations"
)

// rolePrefix marks test roles, as schemaPrefix marks schemas: roles are
// cluster-wide, so a killed run's are swept by age too.
const rolePrefix = "sltest_role_"

// Role creates a login role with exactly the privileges that
// migrations.Grants gives kind on schema, runs them, and drops the role
// when the test ends. The role is no superuser, cannot create databases
// or roles, has no CREATE on the schema and owns nothing. EXECUTE on the
// schema's functions is revoked from PUBLIC first (as a hardened database
// does), so that the role's own grants are all it has. Its name is unique
// to the call, so parallel tests never share one.
func Role(tb testing.TB, schema string, kind migrations.RoleKind) string {
	tb.Helper()
	role := roleName(string(kind))
	grants, err := migrations.Grants(schema, role, kind)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	stmts := []string{
		"CREATE ROLE " + pgx.Identifier{role}.Sanitize() + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
		"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA " + pgx.Identifier{schema}.Sanitize() + " FROM PUBLIC",
	}
	makeRole(tb, role, append(stmts, grants...))
	return role
}

// BareRole creates a login role with no privilege at all, dropped when
// the test ends, for a test to grant what it means to.
func BareRole(tb testing.TB) string {
	tb.Helper()
	role := roleName("bare")
	makeRole(tb, role, []string{"CREATE ROLE " + pgx.Identifier{role}.Sanitize() + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"})
	return role
}

// roleName is a fresh role name, dated for the sweep of leftovers.
func roleName(suffix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return testschema.Name(rolePrefix, hex.EncodeToString(b[:])+"_"+suffix)
}

// makeRole runs stmts, the first of which creates role, and drops role
// when the test ends.
func makeRole(tb testing.TB, role string, stmts []string) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, Server(tb).URL)
	if err != nil {
		tb.Fatalf("pgtest: connecting: %v", err)
	}
	defer conn.Close(ctx)
	tb.Cleanup(func() { dropRole(tb, role) })
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			tb.Fatalf("pgtest: %s: %v", s, err)
		}
	}
}

// ConfigAs is Config for connections as role (the test server trusts
// local connections, so a role needs no password).
func ConfigAs(tb testing.TB, schema, role string) *pgxpool.Config {
	tb.Helper()
	cfg := Config(tb, schema)
	cfg.ConnConfig.User = role
	return cfg
}

// PoolAs opens a pool on schema as role, closed when the test ends.
func PoolAs(tb testing.TB, schema, role string) *pgxpool.Pool {
	tb.Helper()
	return PoolFromConfig(tb, ConfigAs(tb, schema, role))
}

// dropRole revokes what role was granted in this database and drops it.
func dropRole(tb testing.TB, role string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, Server(tb).URL)
	if err != nil {
		tb.Errorf("pgtest: dropping role %s: %v", role, err)
		return
	}
	defer conn.Close(ctx)
	q := pgx.Identifier{role}.Sanitize()
	for _, s := range []string{"DROP OWNED BY " + q, "DROP ROLE " + q} {
		if _, err := conn.Exec(ctx, s); err != nil {
			tb.Errorf("pgtest: %s: %v", s, err)
			return
		}
	}
}

// dropStaleRoles drops the test roles older than olderThan: a killed run's.
func dropStaleRoles(ctx context.Context, url string, olderThan time.Duration) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)", rolePrefix)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range testschema.Stale(names, rolePrefix, olderThan) {
		q := pgx.Identifier{name}.Sanitize()
		for _, s := range []string{"DROP OWNED BY " + q, "DROP ROLE " + q} {
			if _, err := conn.Exec(ctx, s); err != nil {
				return fmt.Errorf("dropping leftover role %s: %w", name, err)
			}
		}
	}
	return nil
}
