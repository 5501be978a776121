package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
)

func TestGrantsInput(t *testing.T) {
	t.Parallel()
	if _, err := migrations.Grants("jobs", "app", "admin"); err == nil || !strings.Contains(err.Error(), "producer, worker, observer or operator") {
		t.Errorf("unknown kind: %v, want an error listing the kinds", err)
	}
	if _, err := migrations.ParseRoleKind("Worker"); err == nil {
		t.Error("ParseRoleKind is case-insensitive; want the exact names")
	}
	for _, c := range [][2]string{{"", "app"}, {"jobs", ""}} {
		if _, err := migrations.Grants(c[0], c[1], migrations.Worker); err == nil {
			t.Errorf("Grants(%q, %q): no error", c[0], c[1])
		}
	}
	// Names are quoted, also inside the DO block's string literal.
	stmts, err := migrations.Grants(`My "Jobs"`, "o'brien", migrations.Observer)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`GRANT USAGE ON SCHEMA "My ""Jobs""" TO "o'brien";`,
		`GRANT SELECT ON TABLE "My ""Jobs""".skiplock_tasks TO "o'brien";`,
		`DO $grant$ BEGIN IF to_regclass('"My ""Jobs""".skiplock_schema_migrations') IS NOT NULL THEN ` +
			`GRANT SELECT ON TABLE "My ""Jobs""".skiplock_schema_migrations TO "o'brien"; END IF; END $grant$;`,
	}
	for _, w := range want {
		if !slices.Contains(stmts, w) {
			t.Errorf("missing %s in\n%s", w, strings.Join(stmts, "\n"))
		}
	}
	if _, err := migrations.Grants("a$grant$b", "app", migrations.Worker); err == nil {
		t.Error("a name that would end the DO block: no error")
	}
	if opt, err := migrations.OptionalGrants("app", migrations.Producer); err != nil || len(opt) != 0 {
		t.Errorf("producer's optional grants: %+v, %v; want none", opt, err)
	}
	if opt, err := migrations.OptionalGrants("app", migrations.Worker); err != nil || len(opt) != 1 || !strings.Contains(opt[0].SQL, "pg_signal_backend") {
		t.Errorf("worker's optional grants: %+v, %v; want pg_signal_backend", opt, err)
	}
}

// TestGrantsLeastPrivilege: on a migrated schema, with the grants of each
// kind applied, no kind has a privilege beyond reading and writing rows
// (no TRUNCATE, REFERENCES, TRIGGER, no CREATE on the schema, no
// ownership); a worker has every privilege a producer has, an operator
// every privilege an observer has; an observer reads every table, and
// every function that is not a trigger is granted to some kind (so a table
// or function added by a later migration cannot be forgotten here).
func TestGrantsLeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t, true)
	admin := pgtest.NewPool(t, schema)
	roles := map[migrations.RoleKind]string{}
	for _, k := range migrations.RoleKinds {
		roles[k] = pgtest.Role(t, schema, k)
	}

	type priv struct{ object, privilege string }
	held := func(role string) map[priv]bool {
		t.Helper()
		rows, err := admin.Query(ctx, `
			SELECT c.relname::text, p.privilege
			FROM pg_class AS c
			CROSS JOIN unnest(CASE WHEN c.relkind = 'S' THEN '{USAGE,SELECT,UPDATE}'::text[]
			                       ELSE '{SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER}'::text[] END) AS p(privilege)
			WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'S')
			  AND CASE WHEN c.relkind = 'S' THEN has_sequence_privilege($1, c.oid, p.privilege)
			           ELSE has_table_privilege($1, c.oid, p.privilege)
			                OR (p.privilege IN ('SELECT', 'INSERT', 'UPDATE')
			                    AND has_any_column_privilege($1, c.oid, p.privilege)) END
			UNION ALL
			SELECT f.oid::regprocedure::text, 'EXECUTE'
			FROM pg_proc AS f
			WHERE f.pronamespace = current_schema()::regnamespace AND has_function_privilege($1, f.oid, 'EXECUTE')
			UNION ALL
			SELECT 'schema', p.privilege
			FROM unnest('{USAGE,CREATE}'::text[]) AS p(privilege)
			WHERE has_schema_privilege($1, current_schema(), p.privilege)`, role)
		if err != nil {
			t.Fatal(err)
		}
		out := map[priv]bool{}
		for rows.Next() {
			var p priv
			if err := rows.Scan(&p.object, &p.privilege); err != nil {
				t.Fatal(err)
			}
			out[p] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	privs := map[migrations.RoleKind]map[priv]bool{}
	for k, role := range roles {
		privs[k] = held(role)
		for p := range privs[k] {
			switch p.privilege {
			case "TRUNCATE", "REFERENCES", "TRIGGER", "CREATE":
				t.Errorf("%s has %s on %s", k, p.privilege, p.object)
			}
		}
		if !privs[k][priv{"schema", "USAGE"}] {
			t.Errorf("%s has no USAGE on the schema", k)
		}
		var owns int
		var powers bool
		if err := admin.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM pg_class WHERE relowner = r.oid) + (SELECT count(*) FROM pg_namespace WHERE nspowner = r.oid),
			       r.rolsuper OR r.rolcreatedb OR r.rolcreaterole OR r.rolbypassrls
			FROM pg_roles AS r WHERE r.rolname = $1`, role).Scan(&owns, &powers); err != nil {
			t.Fatal(err)
		}
		if owns != 0 || powers {
			t.Errorf("%s owns %d objects, superuser/createdb/createrole/bypassrls: %v", k, owns, powers)
		}
	}
	for _, sup := range [][2]migrations.RoleKind{{migrations.Worker, migrations.Producer}, {migrations.Operator, migrations.Observer}} {
		for p := range privs[sup[1]] {
			if !privs[sup[0]][p] {
				t.Errorf("%s lacks %s on %s, which %s has", sup[0], p.privilege, p.object, sup[1])
			}
		}
	}

	rows, err := admin.Query(ctx, `
		SELECT c.relname::text FROM pg_class AS c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		if !privs[migrations.Observer][priv{table, "SELECT"}] {
			t.Errorf("observer cannot read %s: add it to migrations.Grants' tables", table)
		}
	}
	rows, err = admin.Query(ctx, `
		SELECT f.oid::regprocedure::text FROM pg_proc AS f
		WHERE f.pronamespace = current_schema()::regnamespace AND f.prorettype <> 'trigger'::regtype`)
	if err != nil {
		t.Fatal(err)
	}
	functions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range functions {
		granted := false
		for _, k := range migrations.RoleKinds {
			granted = granted || privs[k][priv{f, "EXECUTE"}]
		}
		if !granted {
			t.Errorf("no kind may execute %s: add it to migrations.Grants' functions", f)
		}
	}
}

// TestFunctionsPinSearchPath: every skiplock function but three (unpinned)
// runs with its caller's privileges and its search_path pinned to its own
// schema, then pg_temp: called schema-qualified from a session
// whose search_path names another schema first, with a skiplock_tasks of
// its own, the task goes to skiplock's table. Stepping down one migration
// unpins them; up, they are pinned again. A schema name that needs quotes
// is quoted.
func TestFunctionsPinSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := pgtest.Schema(t, false) // dropped at the end, with what is made here
	schema := "Jobs " + base
	decoy := base + "_decoy"
	admin := pgtest.NewPool(t, base)
	for _, stmt := range []string{
		"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
		"CREATE SCHEMA " + decoy,
		"CREATE TABLE " + decoy + ".skiplock_tasks (LIKE pg_catalog.pg_class)",
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		admin.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+", "+decoy+" CASCADE")
	})
	cfg := pgtest.Config(t, base)
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	pool := pgtest.PoolFromConfig(t, cfg)
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}

	pins := func() map[string]string {
		t.Helper()
		rows, err := pool.Query(ctx, `
			SELECT p.oid::regprocedure::text, coalesce(array_to_string(p.proconfig, ';'), ''), p.prosecdef
			FROM pg_proc AS p WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace AS n WHERE n.nspname = current_schema())`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var name, config string
			var definer bool
			if err := rows.Scan(&name, &config, &definer); err != nil {
				t.Fatal(err)
			}
			if definer {
				t.Errorf("%s is SECURITY DEFINER", name)
			}
			out[name] = config
		}
		return out
	}
	want := fmt.Sprintf("search_path=%s, pg_temp", pgx.Identifier{schema}.Sanitize())
	got := pins()
	if len(got) < 10 {
		t.Fatalf("only %d functions: %v", len(got), got)
	}
	for f, config := range got {
		if unpinned(f) {
			if config != "" {
				t.Errorf("%s: %q, want no pin", f, config)
			}
			continue
		}
		if config != want {
			t.Errorf("%s: %q, want %q", f, config, want)
		}
	}

	// Schema-qualified from the decoy's search_path.
	other := pgtest.Config(t, decoy)
	callers := pgtest.PoolFromConfig(t, other)
	q := pgx.Identifier{schema}.Sanitize()
	for _, call := range []string{
		"SELECT " + q + ".skiplock_enqueue('qualified')",
		"SELECT count(*) FROM " + q + ".skiplock_enqueue_many('[{\"name\": \"qualified\", \"sequence_key\": \"k\"}, {\"name\": \"qualified\", \"sequence_key\": \"k\"}]')",
	} {
		if _, err := callers.Exec(ctx, call); err != nil {
			t.Fatalf("%s: %v", call, err)
		}
	}
	var n, d int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE name = 'qualified'").Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d tasks in skiplock's table (%v), want 3", n, err)
	}
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+decoy+".skiplock_tasks").Scan(&d); err != nil || d != 0 {
		t.Fatalf("%d rows in the decoy table (%v), want 0", d, err)
	}
	// A trigger fired by a change made from the decoy's search_path: the
	// sequence's next task is released in skiplock's table.
	if _, err := callers.Exec(ctx, "UPDATE "+q+".skiplock_tasks SET status = 'completed', finished_at = now() WHERE sequence_key = 'k' AND status = 'pending'"); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks WHERE sequence_key = 'k' AND status = 'pending'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d tasks of the sequence released (%v), want 1", n, err)
	}

	// Down to migration 13, before the pins.
	if err := migrations.Steps(ctx, pool, 13-int(migrations.Latest)); err != nil {
		t.Fatal(err)
	}
	for f, config := range pins() {
		if config != "" {
			t.Errorf("after down: %s still %q", f, config)
		}
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for f, config := range pins() {
		if config != want && !unpinned(f) {
			t.Errorf("after up again: %s: %q, want %q", f, config, want)
		}
	}
}

// unpinned: the functions migration 14 leaves unpinned: the version
// stamp (a constant, redefined by every migration), the insert trigger
// (on every enqueue's path, and naming no skiplock object) and the
// sequence lock key (inlined into its pinned callers).
func unpinned(f string) bool {
	return strings.Contains(f, "skiplock_schema_version(") || strings.Contains(f, "skiplock_notify_insert(") ||
		strings.Contains(f, "skiplock_sequence_lock_key(")
}

// TestAuditGrants: the roles that write the audit trail append records and
// update only what a running change updates (affected, finished_at,
// error); none may rewrite who made a change or what it was, nor forge
// when or as whom; only the worker deletes (retention); a producer appends
// and reads nothing back.
func TestAuditGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t, true)
	admin := pgtest.NewPool(t, schema)
	var id int64
	if err := admin.QueryRow(ctx, `INSERT INTO skiplock_audit (actor, source, action) VALUES ('alice', 'cli', 'purge') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	denied := func(t *testing.T, err error, what string) {
		t.Helper()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s: %v, want permission denied (42501)", what, err)
		}
	}
	rewrites := []string{
		"UPDATE skiplock_audit SET actor = 'x' WHERE id = $1",
		"UPDATE skiplock_audit SET action = 'x' WHERE id = $1",
		"UPDATE skiplock_audit SET source = 'api' WHERE id = $1",
		"UPDATE skiplock_audit SET request = '{}' WHERE id = $1",
		"UPDATE skiplock_audit SET db_role = 'x' WHERE id = $1",
		"UPDATE skiplock_audit SET at = now() - interval '1 year' WHERE id = $1",
	}
	forgeries := []string{
		"INSERT INTO skiplock_audit (actor, source, action, db_role) VALUES ('x', 'cli', 'enqueue', 'someone')",
		"INSERT INTO skiplock_audit (actor, source, action, at) VALUES ('x', 'cli', 'enqueue', now() - interval '1 year')",
	}
	for _, kind := range migrations.RoleKinds {
		t.Run(string(kind), func(t *testing.T) {
			role := pgtest.Role(t, schema, kind)
			pool := pgtest.PoolAs(t, schema, role)
			writes := kind != migrations.Observer
			for _, q := range rewrites {
				_, err := pool.Exec(ctx, q, id)
				denied(t, err, q)
			}
			for _, q := range forgeries {
				_, err := pool.Exec(ctx, q)
				denied(t, err, q)
			}
			// A record as the product writes it: its own db_role and at.
			_, err := pool.Exec(ctx, `INSERT INTO skiplock_audit (actor, source, action, request, affected, finished_at)
				VALUES ('bob', 'api', 'enqueue', '{}', 1, now())`)
			if writes && err != nil {
				t.Errorf("appending a record: %v", err)
			} else if !writes {
				denied(t, err, "appending a record")
			}
			// A running change's progress and end.
			_, err = pool.Exec(ctx, "UPDATE skiplock_audit SET affected = affected + 5, finished_at = now(), error = 'stopped' WHERE id = $1", id)
			switch kind {
			case migrations.Worker, migrations.Operator:
				if err != nil {
					t.Errorf("updating affected, finished_at and error: %v", err)
				}
			default:
				denied(t, err, "updating affected, finished_at and error")
			}
			_, err = pool.Exec(ctx, "DELETE FROM skiplock_audit WHERE id = $1 AND false", id)
			if kind == migrations.Worker {
				if err != nil {
					t.Errorf("retention's delete: %v", err)
				}
			} else {
				denied(t, err, "DELETE")
			}
			// A producer reads nothing of the trail.
			var n int
			err = pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_audit").Scan(&n)
			if kind == migrations.Producer {
				denied(t, err, "reading the trail")
			} else if err != nil {
				t.Errorf("reading the trail: %v", err)
			}
		})
	}
	var actor, action, dbRole string
	if err := admin.QueryRow(ctx, "SELECT actor, action, db_role FROM skiplock_audit WHERE id = $1", id).Scan(&actor, &action, &dbRole); err != nil {
		t.Fatal(err)
	}
	if actor != "alice" || action != "purge" {
		t.Errorf("record %d is now actor %q, action %q: rewritten", id, actor, action)
	}
	rows, err := admin.Query(ctx, "SELECT db_role FROM skiplock_audit WHERE actor = 'bob'")
	if err != nil {
		t.Fatal(err)
	}
	roles, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(roles) != 3 {
		t.Errorf("%d records appended (%v), want one each by producer, worker and operator", len(roles), roles)
	}
	for _, r := range roles {
		if !strings.Contains(r, "_producer") && !strings.Contains(r, "_worker") && !strings.Contains(r, "_operator") {
			t.Errorf("a record appended as db_role %q, not its writer's", r)
		}
	}
}
