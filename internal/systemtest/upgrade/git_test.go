package upgrade

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
)

// The tests of this package build earlier commits of this repository from
// its git history: a normal clone has it, a shallow one does not, and then
// they fail saying how to fetch it rather than skip.

func TestMain(m *testing.M) { pgtest.Main(m) }

// unshallow is what to run when the history is missing.
const unshallow = "git fetch --unshallow"

// repo is the git repository the tests run in.
type repo struct{ root string }

// openRepo finds the repository around the test's directory and checks
// that its history is whole.
func openRepo(t *testing.T) repo {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").CombinedOutput()
	if err != nil {
		t.Fatalf("these tests build earlier commits of skiplock from the repository's git history, "+
			"and git cannot read it (%v: %s): run them in a git clone", err, strings.TrimSpace(string(out)))
	}
	r := repo{root: strings.TrimSpace(string(out))}
	if shallow := r.git(t, "rev-parse", "--is-shallow-repository"); shallow == "true" {
		t.Fatalf("this clone is shallow, and these tests build earlier commits of skiplock from its history: run `%s`", unshallow)
	}
	return r
}

// git runs git in the repository and returns its trimmed output.
func (r repo) git(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", r.root}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out))
}

// extract writes commit's tree into a new temporary directory and returns
// the directory. A commit the clone lacks fails the test, saying how to
// fetch the history.
func (r repo) extract(t *testing.T, commit string) string {
	t.Helper()
	if err := exec.Command("git", "-C", r.root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Fatalf("commit %s is not in this clone: run `%s` (or `git fetch origin`)", commit, unshallow)
	}
	dir := t.TempDir()
	cmd := exec.Command("git", "-C", r.root, "archive", "--format=tar", commit)
	archive, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := untar(archive, dir); err != nil {
		t.Fatalf("extracting %s: %v", commit, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("git archive %s: %v: %s", commit, err, stderr.String())
	}
	return dir
}

// untar writes the regular files and directories of a tar stream under dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return fmt.Errorf("%q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// runGo runs the go command in dir, the root of an extracted commit: that
// module alone (no workspace), with this test's toolchain and the modules
// its go.sum pins (from the module cache or the proxy), with env added to
// the environment. It fails the test with the output on an error.
func runGo(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=readonly"), env...)
	began := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("go %s (%s)", strings.Join(args, " "), time.Since(began).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}
