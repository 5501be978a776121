package migrations_test

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/migrations"
)

var updateDocs = flag.Bool("grants.update", false, "rewrite the roles table of docs/OPERATIONS.md from migrations.Grants")

// The roles table of docs/OPERATIONS.md lies between these lines.
const (
	grantsTableBegin = "<!-- roles table: generated from migrations.Grants by `go test ./migrations -run TestGrantsTableDocumented -grants.update` -->\n"
	grantsTableEnd   = "<!-- end of roles table -->\n"
)

// TestGrantsTableDocumented: docs/OPERATIONS.md's roles table is the one
// grantsTable renders from what `skiplock migrate grants` prints
// (migrations.Grants and OptionalGrants): a grant added, removed or
// changed fails here until the table is regenerated (-grants.update).
func TestGrantsTableDocumented(t *testing.T) {
	t.Parallel()
	const path = "../docs/OPERATIONS.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin := strings.Index(string(doc), grantsTableBegin)
	end := strings.Index(string(doc), grantsTableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no roles table between %q and %q", path, grantsTableBegin, grantsTableEnd)
	}
	have := string(doc[begin+len(grantsTableBegin) : end])
	want := grantsTable(t)
	if have == want {
		return
	}
	if *updateDocs {
		out := string(doc[:begin+len(grantsTableBegin)]) + want + string(doc[end:])
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the roles table of %s", path)
		return
	}
	t.Errorf("%s's roles table is not what migrations.Grants prints; regenerate it with "+
		"go test ./migrations -run TestGrantsTableDocumented -grants.update\nwant:\n%s\nhave:\n%s", path, want, have)
}

// TestGrantsTableCoversGrants: every privilege of every statement Grants
// returns, of every kind, is in docs/OPERATIONS.md's roles table, in that
// kind's row or every kind's: the table leaves none out.
func TestGrantsTableCoversGrants(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	table, _, _ := strings.Cut(string(doc), grantsTableEnd)
	_, table, _ = strings.Cut(table, grantsTableBegin)
	documented := map[string]map[grant]bool{} // by row: "every kind", "producer", ...
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) < 3 {
			continue
		}
		row := map[grant]bool{}
		for _, cell := range cells[1:3] {
			for _, segment := range strings.Split(cell, "; ") {
				names := backticked.FindAllString(segment, -1)
				if strings.HasSuffix(segment, " on the schema") && len(names) == 1 {
					row[grant{object: "the schema", privilege: names[0]}] = true
					continue
				}
				if len(names) < 2 {
					continue
				}
				if colon := strings.Index(segment, ": `"); colon >= 0 && colon < strings.Index(segment, names[1]) { // a table: `t`: `P`, `Q`
					for _, p := range names[1:] {
						row[grant{object: names[0], privilege: p}] = true
					}
					continue
				}
				for _, o := range names[1:] { // `P` on `a`, `b`
					row[grant{object: o, privilege: names[0]}] = true
				}
			}
		}
		documented[cells[0]] = row
	}
	for _, k := range migrations.RoleKinds {
		for _, g := range grantsOf(t, k) {
			g.on, g.when = "", ""
			if !documented[string(k)][g] && !documented["every kind"][g] {
				t.Errorf("docs/OPERATIONS.md's roles table lacks %s's %s on %s", k, g.privilege, g.object)
			}
		}
	}
}

var (
	backticked = regexp.MustCompile("`[^`]+`")
	grantStmt  = regexp.MustCompile(`^GRANT (.+) ON (SCHEMA|TABLE|SEQUENCE|FUNCTION) (\S+) TO "app";$`)
	optional   = regexp.MustCompile(`^DO \$grant\$ BEGIN IF to_regclass\('[^']*'\) IS NOT NULL THEN (GRANT .*;) END IF; END \$grant\$;$`)
)

// grant is one privilege on one object, as the table shows them: names
// in backquotes.
type grant struct {
	object    string // "`skiplock_tasks`"; "the schema"
	on        string // SCHEMA, TABLE, SEQUENCE or FUNCTION
	privilege string // "`SELECT`", "`UPDATE (a, b)`"
	when      string // " (when it exists)" for a table that may be missing
}

// grantsOf is what Grants (schema "jobs", role "app") gives kind, a
// privilege at a time, in its order.
func grantsOf(t *testing.T, kind migrations.RoleKind) []grant {
	t.Helper()
	stmts, err := migrations.Grants("jobs", "app", kind)
	if err != nil {
		t.Fatal(err)
	}
	var out []grant
	for _, stmt := range stmts {
		when := ""
		if m := optional.FindStringSubmatch(stmt); m != nil {
			stmt, when = m[1], " (when it exists)"
		}
		m := grantStmt.FindStringSubmatch(stmt)
		if m == nil {
			t.Fatalf("a grant the table cannot render: %s", stmt)
		}
		object := "the schema"
		if m[2] != "SCHEMA" {
			object = "`" + strings.TrimPrefix(m[3], `"jobs".`) + "`"
		}
		for _, p := range splitPrivileges(m[1]) {
			out = append(out, grant{object: object, on: m[2], privilege: "`" + p + "`", when: when})
		}
	}
	return out
}

// splitPrivileges splits "SELECT, UPDATE (a, b)" at the commas outside
// parentheses.
func splitPrivileges(s string) []string {
	var out []string
	depth, from := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[from:i]))
				from = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[from:]))
}

// grantsTable renders what Grants and OptionalGrants give each kind as a
// Markdown table: what every kind gets in one row, the rest in a row per
// kind; tables with their privileges, then the schema, sequences and
// functions by privilege; then the optional grants.
func grantsTable(t *testing.T) string {
	t.Helper()
	byKind := map[migrations.RoleKind][]grant{}
	count := map[grant]int{}
	for _, k := range migrations.RoleKinds {
		byKind[k] = grantsOf(t, k)
		for _, g := range byKind[k] {
			count[g]++
		}
	}
	var b strings.Builder
	b.WriteString("| kind | tables | schema, sequences, functions | optional grants |\n|---|---|---|---|\n")
	row := func(name string, grants []grant, optional string) {
		var tables, others []string
		at := map[string]int{} // a table's or a privilege's place in its list
		for _, g := range grants {
			if g.on == "TABLE" {
				if i, ok := at[g.object]; ok {
					tables[i] += ", " + g.privilege
					continue
				}
				at[g.object] = len(tables)
				tables = append(tables, g.object+g.when+": "+g.privilege)
				continue
			}
			key := g.on + g.privilege
			if i, ok := at[key]; ok {
				others[i] += ", " + g.object
				continue
			}
			at[key] = len(others)
			others = append(others, g.privilege+" on "+g.object)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, strings.Join(tables, "; "), strings.Join(others, "; "), optional)
	}
	var every []grant
	for _, g := range byKind[migrations.RoleKinds[0]] {
		if count[g] == len(migrations.RoleKinds) {
			every = append(every, g)
		}
	}
	row("every kind", every, "")
	for _, k := range migrations.RoleKinds {
		var own []grant
		for _, g := range byKind[k] {
			if !slices.Contains(every, g) {
				own = append(own, g)
			}
		}
		opts, err := migrations.OptionalGrants("app", k)
		if err != nil {
			t.Fatal(err)
		}
		var optional []string
		for _, o := range opts {
			optional = append(optional, "`"+strings.TrimSuffix(strings.TrimSuffix(o.SQL, ";"), ` TO "app"`)+"`")
		}
		row(string(k), own, strings.Join(optional, "; "))
	}
	return b.String()
}
