// Package readme does what the README's quick start says, as a new user
// would: in an empty directory outside this repository, the shell commands
// between the README's quickstart markers, with the main.go the README
// shows, against a scratch schema. The library is served from this
// checkout by a local module proxy (a directory of the GOPROXY protocol),
// standing in for the module's public releases: `go get ...@latest` is
// run as written.
package readme

import (
	"archive/zip"
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	modulePath = "github.com/skiplock/skiplock"
	version    = "v0.0.0-20260101000000-000000000000" // what @latest finds on the proxy
)

// quickstart is the README's quick start: the command lines of its sh
// block and the text of its go block.
type quickstart struct {
	commands []string
	mainGo   string
}

func readQuickstart(t *testing.T, readme string) quickstart {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	begin, end := strings.Index(text, "<!-- quickstart:begin -->"), strings.Index(text, "<!-- quickstart:end -->")
	if begin < 0 || end < begin {
		t.Fatal("README.md has no <!-- quickstart:begin --> ... <!-- quickstart:end --> section")
	}
	section := text[begin:end]
	var q quickstart
	for _, m := range regexp.MustCompile("(?s)```(sh|go)\n(.*?)```").FindAllStringSubmatch(section, -1) {
		switch m[1] {
		case "sh":
			for _, line := range strings.Split(m[2], "\n") {
				line = strings.TrimSpace(line)
				if line != "" && !strings.HasPrefix(line, "#") {
					q.commands = append(q.commands, line)
				}
			}
		case "go":
			q.mainGo = m[2]
		}
	}
	if len(q.commands) == 0 || q.mainGo == "" {
		t.Fatalf("the README's quick start needs a ```sh block of commands and a ```go block (main.go); found %d commands", len(q.commands))
	}
	return q
}

// TestREADMEQuickstart runs the README's quick start: at most five
// commands from an empty directory to a migrated schema, a producer and a
// consumer that works what the producer enqueued.
func TestREADMEQuickstart(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	q := readQuickstart(t, filepath.Join(root, "README.md"))
	if len(q.commands) > 5 {
		t.Errorf("the quick start takes %d commands, want at most 5: %q", len(q.commands), q.commands)
	}

	proxy := t.TempDir()
	serveModule(t, root, proxy)
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	upstream, err := exec.Command(goBin, "env", "GOPROXY").Output()
	if err != nil {
		t.Fatal(err)
	}

	schema := pgtest.Schema(t, false)
	dbURL := pgtest.SchemaURL(t, schema)

	home := t.TempDir()
	dir := home
	env := append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"PATH="+filepath.Dir(goBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"GOPROXY=file://"+proxy+","+strings.TrimSpace(string(upstream)),
		"GONOSUMDB="+modulePath, // no checksum database knows this checkout
		"GOWORK=off", "GOFLAGS=",
	)
	enqueued := 0
	mkdirCd := regexp.MustCompile(`^mkdir (\S+) && cd (\S+)`)
	for i, line := range q.commands {
		if i == 1 {
			// "Save main.go (below)", after the module is made: the
			// README's go block.
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(q.mainGo), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		last := i == len(q.commands)-1
		if last {
			runConsumer(t, dir, env, line, enqueued)
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		cancel()
		t.Logf("$ %s\n%s", line, out)
		if err != nil {
			t.Fatalf("%q in %s: %v\n%s", line, dir, err, out)
		}
		if m := mkdirCd.FindStringSubmatch(line); m != nil {
			dir = filepath.Join(dir, m[2])
		}
		if strings.Contains(line, "produce") {
			enqueued = len(regexp.MustCompile(`(?m)^enqueued task \d+$`).FindAllString(string(out), -1))
		}
	}
	if enqueued == 0 {
		t.Fatal("the producer printed no `enqueued task N` line")
	}
	// What the user cannot see from the output: every task is completed.
	var completed, all int
	pool := pgtest.NewPool(t, schema)
	err = pool.QueryRow(context.Background(), "SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FROM skiplock_tasks").Scan(&completed, &all)
	if err != nil {
		t.Fatal(err)
	}
	if completed != enqueued || all != enqueued {
		t.Fatalf("%d of %d tasks completed, want all %d the producer enqueued", completed, all, enqueued)
	}
}

// runConsumer starts the consumer, waits until it has worked every task
// the producer enqueued, then presses Ctrl-C (SIGINT to its process group)
// and expects a clean exit.
func runConsumer(t *testing.T, dir string, env []string, line string, enqueued int) {
	t.Helper()
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sent := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			sent <- s.Text()
		}
		close(sent)
	}()
	var lines []string
	deadline := time.After(5 * time.Minute)
	for done := 0; done < enqueued; {
		select {
		case l, ok := <-sent:
			if !ok {
				cmd.Wait()
				t.Fatalf("%q exited before working %d tasks: %q\n%s", line, enqueued, lines, stderr.String())
			}
			lines = append(lines, l)
			if strings.Contains(l, " sent") {
				done++
			}
		case <-deadline:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("%q worked %d lines of %d tasks in 5 minutes: %q\n%s", line, len(lines), enqueued, lines, stderr.String())
		}
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	// `go run` itself exits 1 when interrupted, whatever its program's
	// status: the program's clean stop shows in what it logged.
	err = cmd.Wait()
	t.Logf("$ %s (%v)\n%s\n%s", line, err, strings.Join(lines, "\n"), stderr.String())
	if !strings.Contains(stderr.String(), "worker stopped") || strings.Contains(stderr.String(), "ERROR") {
		t.Fatalf("%q after Ctrl-C: %v; want a clean stop:\n%s", line, err, stderr.String())
	}
}

// serveModule writes the library module, as this checkout has it, into a
// GOPROXY directory: list, info, mod and zip (the module's files under
// module@version/, nested modules and VCS files left out, as `go mod
// download` would fetch them from a release).
func serveModule(t *testing.T, root, proxy string) {
	t.Helper()
	dir := filepath.Join(proxy, modulePath, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("list", []byte(version+"\n"))
	info, _ := json.Marshal(map[string]string{"Version": version, "Time": "2026-01-01T00:00:00Z"})
	write(version+".info", info)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	write(version+".mod", gomod)

	f, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	prefix := modulePath + "@" + version + "/"
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			base := d.Name()
			if base == ".git" || base == "vendor" || base == "node_modules" || strings.HasPrefix(base, "_") || strings.HasPrefix(base, ".") && base != ".ci" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(rel, ".test") || rel == "go.work" || rel == "go.work.sum" {
			return nil
		}
		w, err := zw.Create(prefix + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(w, src)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(fmt.Errorf("zipping the module: %w", err))
	}
}
