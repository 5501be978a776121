//go:build unix

package devpg

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The fallback account has no usable home and cannot enter a private
// TMPDIR; both must be handled when root has no postgres user.
func TestThrowawayAsNobodyWithPrivateTmpdir(t *testing.T) {
	old := runAsCandidates
	t.Cleanup(func() { runAsCandidates = old })
	runAsCandidates = []string{"devpg-no-such-user", "nobody"}
	private := t.TempDir() // 0700, owned by us
	t.Setenv("TMPDIR", private)

	srv := find(t, Options{SkipLocal: true})
	if os.Geteuid() == 0 {
		if srv.runAs == nil || srv.runAs.name != "nobody" {
			t.Fatalf("runAs = %+v, want nobody", srv.runAs)
		}
		if filepath.Dir(srv.dir) != "/tmp" {
			t.Fatalf("dir %s: want a /tmp fallback for a TMPDIR nobody cannot enter", srv.dir)
		}
	}
	if got := queryInt(t, srv.URL, "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
}

// A restart that cannot bind its port must say why (from the server log),
// and a later Restart must recover the stopped cluster.
func TestRestartFailureShowsLogAndRecovers(t *testing.T) {
	srv := find(t, Options{SkipLocal: true})

	ctx := testCtx(t)
	if err := srv.stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(srv.port))
	if err != nil {
		t.Fatal(err)
	}
	err = srv.start(ctx)
	l.Close()
	if err == nil {
		t.Fatal("start succeeded on a port we hold")
	}
	if !strings.Contains(err.Error(), "could not bind") {
		t.Fatalf("error lacks the server log's reason: %v", err)
	}
	t.Logf("expected failure: %v", err)

	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart of a stopped cluster: %v", err)
	}
	if got := queryInt(t, srv.URL, "SELECT 1"); got != 1 {
		t.Fatalf("SELECT 1 = %d", got)
	}
}
