package compare

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Graphile Worker's side runs in Node.js: graphile/bench.mjs, with
// graphile-worker pinned by graphile/package-lock.json. The files are
// embedded, so that a binary built elsewhere (an older build run with
// -also, say) can still set them up.
//
//go:embed graphile/bench.mjs graphile/package.json graphile/package-lock.json
var graphileFiles embed.FS

// graphileProcs is how many worker processes Graphile Worker runs in.
const graphileProcs = 2

// errNoNode is the one line the compare fails with when Node.js is missing.
var errNoNode = errors.New("graphile: Node.js (node and npm) is needed to run Graphile Worker: apt-get install nodejs npm")

// graphileSetup finds the directory to run bench.mjs in, installs its
// node_modules there with npm ci unless they are installed already, and
// returns the directory and graphile-worker's version. The directory is
// the source's (cmd/skiplock-bench/internal/compare/graphile) when this
// binary was built from a checkout that is still there and holds the same
// files (go run, go test), else a copy in the user's cache directory.
func graphileSetup(override string, progress io.Writer) (dir, version string, err error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", "", errNoNode
	}
	dir = override
	if dir == "" {
		if dir, err = graphileDir(); err != nil {
			return "", "", fmt.Errorf("graphile: %w", err)
		}
	}
	lock := filepath.Join(dir, "package-lock.json")
	installed := filepath.Join(dir, "node_modules", ".package-lock.json")
	if !newerThan(installed, lock) {
		npm, err := exec.LookPath("npm")
		if err != nil {
			return "", "", errNoNode
		}
		fmt.Fprintf(progress, "graphile: npm ci in %s\n", dir)
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = progress, progress
		if err := cmd.Run(); err != nil {
			return "", "", fmt.Errorf("graphile: npm ci in %s: %w", dir, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "graphile-worker", "package.json"))
	if err != nil {
		return "", "", fmt.Errorf("graphile: %w", err)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return "", "", fmt.Errorf("graphile: graphile-worker's package.json: %w", err)
	}
	return dir, pkg.Version, nil
}

// newerThan reports whether file a exists and was modified no earlier than b.
func newerThan(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && !sa.ModTime().Before(sb.ModTime())
}

func graphileDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		src := filepath.Join(filepath.Dir(file), "graphile")
		if sameAsEmbedded(src) {
			return src, nil
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	h := sha256.New()
	entries, _ := fs.ReadDir(graphileFiles, "graphile")
	for _, e := range entries {
		b, _ := graphileFiles.ReadFile("graphile/" + e.Name())
		h.Write([]byte(e.Name()))
		h.Write(b)
	}
	dir := filepath.Join(cache, "skiplock-bench", "compare-graphile-"+hex.EncodeToString(h.Sum(nil))[:12])
	if sameAsEmbedded(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, e := range entries {
		b, _ := graphileFiles.ReadFile("graphile/" + e.Name())
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// sameAsEmbedded reports whether dir holds the embedded files as they are.
func sameAsEmbedded(dir string) bool {
	entries, err := fs.ReadDir(graphileFiles, "graphile")
	if err != nil {
		return false
	}
	for _, e := range entries {
		want, _ := graphileFiles.ReadFile("graphile/" + e.Name())
		got, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || !bytes.Equal(got, want) {
			return false
		}
	}
	return true
}
