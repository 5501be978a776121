package apicheck

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.txt from the packages' current API")

const module = "github.com/skiplock/skiplock"

// publicPackages lists the packages a user imports: every package of the
// workspace's modules (go.work) but commands, internal packages, the sqlc
// output (db, never part of an exported signature) and what lives under
// cmd/ and examples/.
func publicPackages(t *testing.T, root string) []string {
	t.Helper()
	if work := strings.TrimSpace(goCmd(t, root, "env", "GOWORK")); work == "" || work == "off" {
		t.Fatalf("the API check covers every module of go.work (worker/observe is one): run it in workspace mode, not with GOWORK=off")
	}
	mods := goCmd(t, root, "list", "-m", "-f", "{{.Dir}}")
	var patterns []string
	for _, dir := range strings.Fields(mods) {
		rel, err := filepath.Rel(root, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("module %s is outside the repository %s", dir, root)
		}
		patterns = append(patterns, "./"+filepath.ToSlash(rel)+"/...")
	}
	out := goCmd(t, root, append([]string{"list", "-f", "{{.ImportPath}} {{.Name}}"}, patterns...)...)
	var pkgs []string
	for line := range strings.Lines(out) {
		path, name, _ := strings.Cut(strings.TrimSpace(line), " ")
		rel := strings.TrimPrefix(path, module+"/")
		switch {
		case name == "main", path == module+"/db",
			slices.Contains(strings.Split(path, "/"), "internal"),
			strings.HasPrefix(rel, "cmd/"), strings.HasPrefix(rel, "examples/"):
			continue
		}
		pkgs = append(pkgs, path)
	}
	if len(pkgs) == 0 {
		t.Fatalf("no public package found with go list %s", strings.Join(patterns, " "))
	}
	return pkgs
}

func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

// goldenName is the file of a package's API in testdata: its path in the
// repository with / as _ (worker/lock: worker_lock.txt).
func goldenName(path string) string {
	return strings.ReplaceAll(strings.TrimPrefix(path, module+"/"), "/", "_") + ".txt"
}

// TestAPI compares the exported API of every public package with its
// file in testdata, and prints its size with -v.
func TestAPI(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	paths := publicPackages(t, root)
	pkgs, err := Load(root, paths...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, path := range paths {
		pkg := pkgs[path]
		if pkg == nil {
			t.Fatalf("%s: not loaded", path)
		}
		lines, counts := API(pkg)
		got := strings.Join(lines, "\n") + "\n"
		file := filepath.Join("testdata", goldenName(path))
		want[filepath.Base(file)] = true
		if testing.Verbose() || *update {
			doc := goCmd(t, root, "doc", "-all", path)
			t.Logf("%s: %s; go doc -all: %d lines", path, counts, strings.Count(doc, "\n"))
		}
		if *update {
			if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		golden, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: no API file (%v): run `go test ./internal/apicheck -update` and commit internal/apicheck/testdata", path, err)
			continue
		}
		if d := diff(strings.Split(strings.TrimSuffix(string(golden), "\n"), "\n"), lines); d != "" {
			t.Errorf("the exported API of %s differs from %s (- in the file, + in the code):\n%s\n"+
				"If the change is intended, run `go test ./internal/apicheck -update` and commit internal/apicheck/testdata with it.",
				path, file, d)
		}
	}
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if want[filepath.Base(f)] {
			continue
		}
		if *update {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s names no public package: run `go test ./internal/apicheck -update` to remove it", f)
	}
}

// diff returns the lines only in want (-) and only in got (+); both are
// sorted sets of lines.
func diff(want, got []string) string {
	var b strings.Builder
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j == len(got) || i < len(want) && want[i] < got[j]:
			fmt.Fprintf(&b, "-%s\n", want[i])
			i++
		case i == len(want) || got[j] < want[i]:
			fmt.Fprintf(&b, "+%s\n", got[j])
			j++
		default:
			i++
			j++
		}
	}
	return b.String()
}

// TestDiff checks the diff the failure message shows.
func TestDiff(t *testing.T) {
	t.Parallel()
	got := diff([]string{"a", "b", "d"}, []string{"b", "c", "d", "e"})
	if want := "-a\n+c\n+e\n"; got != want {
		t.Errorf("diff = %q, want %q", got, want)
	}
	if d := diff([]string{"a"}, []string{"a"}); d != "" {
		t.Errorf("diff of equal lists = %q, want empty", d)
	}
}
