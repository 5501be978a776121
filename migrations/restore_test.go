package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
)

// schemaShape describes every object of the pool's schema that a migration
// may create or change, schema names left out: tables and their columns
// (in column order), defaults, storage options, constraints, indexes,
// triggers and functions (their source included).
func schemaShape(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	var schema string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	queries := []string{
		`SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		        || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
		        || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
		        || CASE WHEN a.attgenerated <> '' THEN ' generated' ELSE '' END
		        || CASE WHEN a.attidentity <> '' THEN ' identity' ELSE '' END
		 FROM pg_class AS c
		 JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		 LEFT JOIN pg_attrdef AS d ON d.adrelid = c.oid AND d.adnum = a.attnum
		 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
		 ORDER BY c.relname, a.attnum`,
		`SELECT c.relname || ' ' || c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
		 FROM pg_class AS c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'i', 'S')
		 ORDER BY 1`,
		`SELECT c.conrelid::regclass::text || ' ' || c.conname || ' ' || pg_get_constraintdef(c.oid)
		 FROM pg_constraint AS c WHERE c.connamespace = current_schema()::regnamespace ORDER BY 1`,
		`SELECT pg_get_indexdef(i.indexrelid)
		 FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
		 WHERE c.relnamespace = current_schema()::regnamespace ORDER BY c.relname`,
		`SELECT pg_get_triggerdef(g.oid)
		 FROM pg_trigger AS g JOIN pg_class AS c ON c.oid = g.tgrelid
		 WHERE c.relnamespace = current_schema()::regnamespace AND NOT g.tgisinternal ORDER BY g.tgname`,
		`SELECT p.proname || '(' || pg_get_function_arguments(p.oid) || ') ' || pg_get_function_result(p.oid)
		        || ' ' || p.provolatile::text || ' ' || md5(p.prosrc)
		 FROM pg_proc AS p WHERE p.pronamespace = current_schema()::regnamespace ORDER BY 1`,
	}
	var b strings.Builder
	for _, q := range queries {
		rows, err := pool.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			b.WriteString(strings.ReplaceAll(line, schema+".", "") + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestDownRestores: each down migration takes the schema back exactly to
// what the migrations before it made, so that a step down and up again is
// no change (TestUpDownUp checks that the steps run; the first one's down
// drops everything, checked there too).
func TestDownRestores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	versions := migrations.Versions()
	for i, v := range versions {
		if i == 0 {
			continue
		}
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			t.Parallel()
			before := pgtest.NewPool(t, pgtest.Schema(t, false))
			if err := migrations.Steps(ctx, before, i); err != nil {
				t.Fatal(err)
			}
			upDown := pgtest.NewPool(t, pgtest.Schema(t, false))
			if err := migrations.Steps(ctx, upDown, i+1); err != nil {
				t.Fatal(err)
			}
			if schemaShape(t, upDown) == schemaShape(t, before) {
				t.Fatalf("migration %d changes nothing that schemaShape sees", v)
			}
			if err := migrations.Steps(ctx, upDown, -1); err != nil {
				t.Fatal(err)
			}
			want, got := schemaShape(t, before), schemaShape(t, upDown)
			if got != want {
				t.Fatalf("down from %d leaves a schema unlike %d's:\n%s", v, versions[i-1], lineDiff(want, got))
			}
		})
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for l := range w {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for l := range g {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
