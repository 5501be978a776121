package hapg

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Without pg_auto_failover, Start fails (it never skips) and says what to
// install.
func TestStartWithoutPackages(t *testing.T) {
	oldAutoctl, oldRoot := autoctlPath, debianRoot
	defer func() { autoctlPath, debianRoot = oldAutoctl, oldRoot }()
	t.Setenv("PATH", t.TempDir())
	autoctlPath, debianRoot = t.TempDir()+"/pg_autoctl", t.TempDir()
	_, err := Start(context.Background(), Options{})
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "apt-get install postgresql-15-auto-failover pg-auto-failover-cli") {
		t.Fatalf("Start = %v, want ErrNotInstalled naming the packages", err)
	}

	// pg_autoctl alone, without the extension: the same.
	t.Setenv("PATH", "/usr/bin:/bin")
	autoctlPath = oldAutoctl
	if _, err := Start(context.Background(), Options{}); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Start without the extension = %v, want ErrNotInstalled", err)
	}
}
