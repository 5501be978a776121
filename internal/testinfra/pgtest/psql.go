package pgtest

import (
	"os/exec"
	"testing"
)

// Psql returns psql's path, or fails tb saying what to install: the tests
// that run the README's SQL recipes and scripts need the client.
func Psql(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("psql")
	if err != nil {
		tb.Fatal("psql not found: install it (Debian: apt-get install postgresql-client; .ci/test installs .ci/packages)")
	}
	return p
}
