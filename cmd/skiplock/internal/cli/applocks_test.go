package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/worker/lock"
)

// TestLocksNamed: `skiplock locks` names the application's session locks,
// with the session holding them, and its leases, with holder, token and
// expiry.
func TestLocksNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	if out := b.run(t, "locks").ok(t).stdout; !strings.Contains(out, "No named locks or leases are held.") {
		t.Fatalf("locks on an idle schema:\n%s", out)
	}
	client, err := lock.New(b.pool, lock.Options{ID: "billing-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	l, err := client.TryAcquire(ctx, "billing:rebuild", lock.Shared)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	lease, err := client.TryLease(ctx, "exporter", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)

	var out struct {
		NamedLocks []struct {
			Names           []string `json:"names"`
			Mode            string   `json:"mode"`
			ApplicationName string   `json:"application_name"`
		} `json:"named_locks"`
		Leases []struct {
			Name             string  `json:"name"`
			Holder           string  `json:"holder"`
			Token            int64   `json:"token"`
			ExpiresInSeconds float64 `json:"expires_in_seconds"`
		} `json:"leases"`
	}
	// The name is recorded in the background, just after the lock is taken.
	waitFor(t, time.Second, "the lock's name to be recorded", func() bool {
		b.run(t, "locks", "--json").ok(t).decode(t, &out)
		return len(out.NamedLocks) == 1 && len(out.NamedLocks[0].Names) == 1
	})
	if n := out.NamedLocks[0]; n.Names[0] != "billing:rebuild" || n.Mode != "shared" || n.ApplicationName != "skiplock lock billing-1" {
		t.Fatalf("named_locks = %+v", out.NamedLocks)
	}
	if len(out.Leases) != 1 || out.Leases[0].Name != "exporter" || out.Leases[0].Holder != "billing-1" ||
		out.Leases[0].Token != lease.Token() || out.Leases[0].ExpiresInSeconds <= 0 {
		t.Fatalf("leases = %+v, want exporter held by billing-1 with token %d", out.Leases, lease.Token())
	}
	human := b.run(t, "locks").ok(t).stdout
	for _, want := range []string{"Named locks held (1):", "billing:rebuild", "shared", "skiplock lock billing-1", "Leases (1):", "exporter"} {
		if !strings.Contains(human, want) {
			t.Fatalf("locks lacks %q:\n%s", want, human)
		}
	}
}
