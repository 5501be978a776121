package doctest

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// A snippet is a ```go block of a document.
type snippet struct {
	file string // relative to the repository: README.md, docs/TASKS.md
	path string // absolute, for //line directives
	line int    // of the block's first line of code
	code string
}

// skipMarker, on the line before a block's fence, leaves it out: for a
// block that is deliberately not Go code (a signature, output). Say why
// after it.
const skipMarker = "<!-- snippet: skip"

var fence = regexp.MustCompile("^\\s*```")

// extract returns the ```go blocks of the document at path (rel names it
// in errors), without those marked with skipMarker.
func extract(t *testing.T, path, rel string) []snippet {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		out    []snippet
		in     bool
		keep   bool
		indent string
		cur    snippet
		prev   string // the last non-blank line outside a block
	)
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && fence.MatchString(line):
			in = true
			trimmed := strings.TrimSpace(line)
			keep = strings.TrimPrefix(trimmed, "```") == "go" && !strings.HasPrefix(strings.TrimSpace(prev), skipMarker)
			indent = line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			cur = snippet{file: rel, path: path, line: n + 1}
		case in && fence.MatchString(line):
			in = false
			if keep {
				out = append(out, cur)
			}
		case in:
			cur.code += strings.TrimPrefix(line, indent) + "\n"
		case strings.TrimSpace(line) != "":
			prev = line
		}
	}
	return out
}

// packages are the imports a snippet may use, by the name it uses: the
// harness imports those it names (as goimports would).
var packages = map[string]string{
	"context":      "context",
	"errors":       "errors",
	"fmt":          "fmt",
	"http":         "net/http",
	"json":         "encoding/json",
	"log":          "log",
	"os":           "os",
	"slog":         "log/slog",
	"strings":      "strings",
	"testing":      "testing",
	"time":         "time",
	"pgx":          "github.com/jackc/pgx/v5",
	"pgxpool":      "github.com/jackc/pgx/v5/pgxpool",
	"prometheus":   "github.com/prometheus/client_golang/prometheus",
	"dashboard":    "github.com/skiplock/skiplock/queue/dashboard",
	"lock":         "github.com/skiplock/skiplock/worker/lock",
	"migrations":   "github.com/skiplock/skiplock/migrations",
	"observe":      "github.com/skiplock/skiplock/worker/observe",
	"queue":        "github.com/skiplock/skiplock/queue",
	"skiplocktest": "github.com/skiplock/skiplock/worker/skiplocktest",
	"worker":       "github.com/skiplock/skiplock/worker",
}

// givens are what snippets use without declaring it: the application's
// values, types and functions around them. The harness declares, at
// package level, each one a snippet names and does not declare itself.
var givens = map[string]string{
	// The usual values.
	"ctx":      "var ctx context.Context",
	"pool":     "var pool *pgxpool.Pool",
	"tx":       "var tx pgx.Tx",
	"client":   "var client *queue.Client",
	"q":        "var q *queue.Client",
	"w":        "var w *worker.Worker",
	"handlers": "var handlers worker.Handlers",
	"cfg":      "var cfg worker.Config",
	"locks":    "var locks *lock.Client",
	"logger":   "var logger *slog.Logger",
	"mux":      "var mux *http.ServeMux",
	"ids":      "var ids []int64",
	"id":       "var id int64",
	"i":        "var i int",
	"n":        "var n int",
	"pages":    "var pages int",
	"files":    "var files []string",
	"cursor":   "var cursor struct{ Page int }",
	"key1":     "var key1 []byte",
	"key2":     "var key2 []byte",
	"oldKey":   "var oldKey []byte",
	"newKey":   "var newKey []byte",
	"tasks":    "var tasks []queue.NewTask",
	// Payloads.
	"payload": "var payload any",
	"invoice": "var invoice any",
	"inv":     "var inv any",
	"req":     "var req any",
	"doc":     "var doc any",
	"src":     "var src any",
	"entry":   "var entry any",
	"r":       "var r any",
	"d":       "var d any",
	"a":       "var a any",
	"e":       "var e any",
	"p":       "var p any",
	// Types.
	"Email":     "type Email struct{ To string }",
	"Signup":    "type Signup struct{ Email string }\n\nfunc (Signup) TaskName() string { return \"signup\" }",
	"Charge":    "type Charge struct{ Card string }",
	"Thumb":     "type Thumb struct{ URL string }",
	"Report":    "type Report struct{ To string }",
	"Publish":   "type Publish struct{ Feed string }\n\nfunc (Publish) TaskName() string { return \"publish\" }",
	"throttled": "var throttled *throttledError\n\ntype throttledError struct{ RetryAfter time.Duration }\n\nfunc (*throttledError) Error() string { return \"throttled\" }",
	// Errors.
	"ErrAccountGone": "var ErrAccountGone error",
	"ErrBadRequest":  "var ErrBadRequest error",
	// The application's functions.
	"send":            "func send(context.Context, any) error { return nil }",
	"bulkIndex":       "func bulkIndex(context.Context, []*worker.Task) []error { return nil }",
	"runReport":       "func runReport(context.Context) error { return nil }",
	"rebuild":         "func rebuild(context.Context) error { return nil }",
	"sendDailyReport": "func sendDailyReport(context.Context) error { return nil }",
	"export":          "func export(context.Context, int64) {}",
	"importPage":      "func importPage(context.Context, int) error { return nil }",
	"resize":          "func resize(context.Context, *worker.Task) (Thumb, error) { return Thumb{}, nil }",
	"sendReport":      "func sendReport(context.Context, *queue.BatchInfo) error { return nil }",
	"alert":           "func alert(*worker.Task, any, []byte) {}",
	"userFrom":        "func userFrom(context.Context) struct{ Email string; IsAdmin bool } { return struct{ Email string; IsAdmin bool }{} }",
	"requireLogin":    "func requireLogin(h http.Handler) http.Handler { return h }",
	"crm":             "var crm struct{ Upsert func(context.Context, []*worker.Task) []error }",
	"app": `var app struct {
	Signup   func(context.Context, pgx.Tx, string) error
	Handlers func() worker.Handlers
}`,
	"appConfig": "var appConfig worker.Config",
	"charge":    "func charge(context.Context, Charge) error { return nil }",
	"args": `var args resizeArgs

type resizeArgs struct{ Width int }

func (resizeArgs) TaskName() string              { return "resize" }
func (resizeArgs) TaskOptions() []queue.Option { return nil }`,
}

// givensIn are a document's own givens, where a name means something else
// than in the others: in LOCKS.md, client is the lock client.
var givensIn = map[string]map[string]string{
	"docs/LOCKS.md": {"client": "var client *lock.Client"},
}

// build is a snippet as a Go file: as it is when it is a whole program,
// else its declarations at package level and its statements in a function,
// with the givens it names and the imports it uses. //line directives make
// the compiler's errors name the document's lines.
func build(s snippet) (string, error) {
	if regexp.MustCompile(`(?m)^package main$`).MatchString(s.code) {
		return fmt.Sprintf("//line %s:%d\n%s", s.path, s.line, s.code), nil
	}
	// Split: a line at column 0 that begins a func or a type declaration
	// starts a declaration, up to its closing brace at column 0; the rest
	// are statements.
	var decls, body strings.Builder
	lines := strings.Split(strings.TrimRight(s.code, "\n"), "\n")
	bodyStart := -1
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "func ") || strings.HasPrefix(l, "type ") {
			fmt.Fprintf(&decls, "//line %s:%d\n", s.path, s.line+i)
			decls.WriteString(l + "\n")
			if strings.HasSuffix(strings.TrimSpace(l), "{") {
				for i++; i < len(lines); i++ {
					decls.WriteString(lines[i] + "\n")
					if lines[i] == "}" {
						break
					}
				}
			}
			continue
		}
		if strings.TrimSpace(l) == "" && bodyStart < 0 {
			continue
		}
		if bodyStart < 0 {
			bodyStart = i
			fmt.Fprintf(&body, "//line %s:%d\n", s.path, s.line+i)
		}
		body.WriteString(l + "\n")
	}

	fn := "func snippet() error {\n" + body.String() + "}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, s.path, "package main\n"+decls.String()+fn, parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	declared := map[string]bool{}
	var snippetFn *ast.FuncDecl
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.Name == "snippet" && d.Recv == nil {
				snippetFn = d
			} else if d.Recv == nil {
				declared[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				if ts, ok := sp.(*ast.TypeSpec); ok {
					declared[ts.Name.Name] = true
				}
			}
		}
	}
	// The statements' own variables: declared, and used (by the reader's
	// code that follows) with a blank assignment on the same line.
	src := "package main\n" + decls.String() + fn
	base := fset.File(f.Pos()).Base()
	type insert struct {
		at   int
		text string
	}
	var inserts []insert
	stmts := snippetFn.Body.List
	for _, st := range stmts {
		var names []string
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, l := range st.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name != "_" {
						names = append(names, id.Name)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok {
				for _, sp := range gd.Specs {
					switch sp := sp.(type) {
					case *ast.ValueSpec:
						for _, id := range sp.Names {
							if id.Name != "_" {
								names = append(names, id.Name)
							}
						}
					case *ast.TypeSpec:
						declared[sp.Name.Name] = true
					}
				}
			}
		}
		for _, name := range names {
			declared[name] = true
		}
		if gd, ok := st.(*ast.DeclStmt); ok && gd.Decl.(*ast.GenDecl).Tok == token.TYPE {
			continue
		}
		if len(names) > 0 {
			inserts = append(inserts, insert{int(st.End()) - base, "; _ = " + strings.Join(names, "; _ = ")})
		}
	}
	// A body whose last statement does not return returns nil.
	if n := len(stmts); n == 0 || !isReturn(stmts[n-1]) {
		inserts = append(inserts, insert{int(snippetFn.Body.Rbrace) - base, "\nreturn nil\n"})
	}
	sort.Slice(inserts, func(i, j int) bool { return inserts[i].at > inserts[j].at })
	for _, in := range inserts {
		src = src[:in.at] + in.text + src[in.at:]
	}
	code := strings.TrimPrefix(src, "package main\n")

	// The givens it names and does not declare, then the imports of all.
	used := identifiers(code)
	var given []string
	for name := range used {
		decl, ok := givensIn[s.file][name]
		if !ok {
			decl, ok = givens[name]
		}
		if ok && !declared[name] {
			given = append(given, decl)
		}
	}
	slices.Sort(given)
	all := strings.Join(given, "\n\n") + "\n\n" + code
	var imports []string
	for name := range qualifiers(all) {
		if path, ok := packages[name]; ok && !declared[name] {
			imports = append(imports, fmt.Sprintf("%q", path))
		}
	}
	slices.Sort(imports)
	var out strings.Builder
	out.WriteString("package main\n\n")
	if len(imports) > 0 {
		out.WriteString("import (\n\t" + strings.Join(imports, "\n\t") + "\n)\n\n")
	}
	out.WriteString("//line harness.go:1\n")
	out.WriteString(all)
	out.WriteString("\n//line harness.go:1000\nfunc main() {}\n")
	return out.String(), nil
}

func isReturn(s ast.Stmt) bool {
	_, ok := s.(*ast.ReturnStmt)
	return ok
}

// identifiers are the names code uses other than after a dot.
func identifiers(code string) map[string]bool {
	out := map[string]bool{}
	scan(code, func(prev, tok token.Token, lit string, next token.Token) {
		if tok == token.IDENT && prev != token.PERIOD {
			out[lit] = true
		}
	})
	return out
}

// qualifiers are the names code uses before a dot, as a package's.
func qualifiers(code string) map[string]bool {
	out := map[string]bool{}
	scan(code, func(prev, tok token.Token, lit string, next token.Token) {
		if tok == token.IDENT && prev != token.PERIOD && next == token.PERIOD {
			out[lit] = true
		}
	})
	return out
}

func scan(code string, fn func(prev, tok token.Token, lit string, next token.Token)) {
	var s scanner.Scanner
	fset := token.NewFileSet()
	s.Init(fset.AddFile("", -1, len(code)), []byte(code), nil, 0)
	type item struct {
		tok token.Token
		lit string
	}
	var toks []item
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		toks = append(toks, item{tok, lit})
	}
	for i, it := range toks {
		prev, next := token.ILLEGAL, token.ILLEGAL
		if i > 0 {
			prev = toks[i-1].tok
		}
		if i+1 < len(toks) {
			next = toks[i+1].tok
		}
		fn(prev, it.tok, it.lit, next)
	}
}

// TestSnippetsCompile builds every ```go block of README.md and docs/*.md,
// each as a program of its own, with go vet in a module of a workspace
// that uses this repository's modules. A block that does not compile
// fails the test with the document's file and line.
func TestSnippetsCompile(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{filepath.Join(root, "README.md")}, docs...)
	var snippets []snippet
	for _, path := range docs {
		rel, _ := filepath.Rel(root, path)
		snippets = append(snippets, extract(t, path, rel)...)
	}
	if len(snippets) < 30 {
		t.Fatalf("found %d go blocks in README.md and docs/; the extraction is broken", len(snippets))
	}

	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goVersion := goDirective(t, filepath.Join(root, "go.mod"))
	write("go.mod", "module snippets\n\ngo "+goVersion+"\n")
	write("go.work", fmt.Sprintf("go %s\n\nuse (\n\t.\n\t%s\n\t%s\n)\n\nreplace github.com/skiplock/skiplock v0.0.0-00010101000000-000000000000 => %s\n",
		goVersion, root, filepath.Join(root, "worker", "observe"), root))
	if sum, err := os.ReadFile(filepath.Join(root, "go.work.sum")); err == nil {
		write("go.work.sum", string(sum))
	}
	where := map[string]snippet{}
	for i, s := range snippets {
		code, err := build(s)
		if err != nil {
			t.Errorf("the go block at %s:%d does not parse: %s", s.file, s.line, strings.ReplaceAll(err.Error(), root+string(filepath.Separator), ""))
			continue
		}
		name := fmt.Sprintf("s%03d", i)
		where[name] = s
		write(filepath.Join(name, "main.go"), code)
	}

	cmd := exec.Command("go", "vet", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		// The errors name the documents' lines (//line); a package's
		// header names its directory.
		report := strings.ReplaceAll(string(out), root+string(filepath.Separator), "")
		for name, s := range where {
			report = strings.ReplaceAll(report, "# snippets/"+name+"\n# [snippets/"+name+"]\n", fmt.Sprintf("# the go block at %s:%d\n", s.file, s.line))
			report = strings.ReplaceAll(report, "# snippets/"+name+"\n", fmt.Sprintf("# the go block at %s:%d\n", s.file, s.line))
			report = strings.ReplaceAll(report, "vet: "+name+"/", "vet: ")
		}
		t.Fatalf("go vet of the go blocks of README.md and docs/ failed:\n%s\nA block that is deliberately not Go code can be marked with %s: why -->\non the line before its fence.", report, skipMarker)
	}
	t.Logf("%d go blocks of %d documents compile", len(snippets), len(docs))
}

// goDirective is the go version of a go.mod.
func goDirective(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s has no go directive", path)
	}
	return string(m[1])
}

// The harness declares what a fragment names and does not declare, imports
// what it uses, keeps the document's lines, and marks its own variables
// used.
func TestBuildFragment(t *testing.T) {
	code, err := build(snippet{file: "docs/X.md", path: "/repo/docs/X.md", line: 10, code: "id, err := q.Enqueue(ctx, \"a\", nil)\n\nclient := queue.New(pool) // mine\n"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"github.com/skiplock/skiplock/queue"`, `"context"`, `"github.com/jackc/pgx/v5/pgxpool"`,
		"var q *queue.Client", "var ctx context.Context", "var pool *pgxpool.Pool",
		"//line /repo/docs/X.md:10\nid, err := q.Enqueue(ctx, \"a\", nil); _ = id; _ = err\n",
		"client := queue.New(pool); _ = client // mine",
	} {
		if !strings.Contains(code, want) {
			t.Errorf("the harness of the fragment lacks %q:\n%s", want, code)
		}
	}
	if strings.Contains(code, "var client") || strings.Contains(code, `"os"`) {
		t.Errorf("the harness declares client, which the fragment declares, or imports os, which it does not use:\n%s", code)
	}
	// A whole program is built as it is.
	prog := "package main\n\nfunc main() {}\n"
	if code, err := build(snippet{path: "/repo/README.md", line: 3, code: prog}); err != nil || code != "//line /repo/README.md:3\n"+prog {
		t.Errorf("build of a program = %q, %v", code, err)
	}
}

// extract takes the go blocks, indented ones too, and leaves out those
// marked to skip and those of other languages.
func TestExtract(t *testing.T) {
	md := "# T\n\n```go\na := 1\n```\n\n<!-- snippet: skip: a signature -->\n```go\nfunc F(x int) error\n```\n\n```sh\nls\n```\n\n- item:\n\n  ```go\n  b := 2\n  ```\n"
	path := filepath.Join(t.TempDir(), "T.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	got := extract(t, path, "T.md")
	if len(got) != 2 || got[0].code != "a := 1\n" || got[0].line != 4 || got[1].code != "b := 2\n" || got[1].line != 19 {
		t.Fatalf("extract = %+v, want the blocks at lines 4 and 19", got)
	}
}
