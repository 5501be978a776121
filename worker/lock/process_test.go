package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/worker/lock"
)

// Guarantees across OS processes: the holders are children (child_test.go),
// the contender often this process.

type bundle struct {
	schema string
	pool   *pgxpool.Pool
}

func setup(t *testing.T) bundle {
	t.Helper()
	schema := pgtest.Schema(t, true)
	return bundle{schema: schema, pool: pgtest.NewPool(t, schema)}
}

func newClient(t *testing.T, pool *pgxpool.Pool, opts lock.Options) *lock.Client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := lock.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestMutualExclusionAcrossProcesses: two processes take turns 40 times
// each under one lock, each checking that nobody else is inside and
// incrementing a counter in a file: no overlap, no lost increment.
func TestMutualExclusionAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	file := filepath.Join(t.TempDir(), "counter")
	env := map[string]string{"NAME": "counter", "N": "40", "FILE": file}
	a := startChild(t, pgtest.Config(t, b.schema), "counter", env)
	c := startChild(t, pgtest.Config(t, b.schema), "counter", env)
	a.expect(t, "done", 10*time.Second)
	c.expect(t, "done", 10*time.Second)
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(string(got)); n != 80 {
		t.Fatalf("counter = %s, want 80: increments were lost, so the critical sections overlapped", got)
	}
}

// TestKilledHolderReleased: a process killed (SIGKILL) while holding a
// lock loses it with its connection; another process takes it at once.
func TestKilledHolderReleased(t *testing.T) {
	t.Parallel()
	b := setup(t)
	holder := startChild(t, pgtest.Config(t, b.schema), "hold", map[string]string{"NAME": "report"})
	holder.expect(t, "acquired", 5*time.Second)
	c := newClient(t, b.pool, lock.Options{ID: "contender"})
	ctx := context.Background()
	if _, err := c.TryAcquire(ctx, "report", lock.Exclusive); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while another process holds the lock: %v, want ErrNotAcquired", err)
	}
	// Operators see it by name, with the holder's session.
	want := "skiplock lock child-" + strconv.Itoa(holder.cmd.Process.Pid)
	listed(t, c, fmt.Sprintf("report held exclusively by %q", want), func(locks []lock.HeldLock) bool {
		return len(locks) == 1 && len(locks[0].Names) == 1 && locks[0].Names[0] == "report" && locks[0].ApplicationName == want && locks[0].Mode == lock.Exclusive
	})

	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	actx, cancel := context.WithTimeout(ctx, pgtest.Patient(time.Second))
	defer cancel()
	l, err := c.Acquire(actx, "report", lock.Exclusive)
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	t.Logf("the lock of a killed holder was taken by another process %s after the kill", time.Since(killed).Round(time.Millisecond))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseAcrossProcesses: a lease renewed by its holder stays its
// holder's past three TTLs; released, another takes it with a greater
// fencing token. The TTL is twice the least, so that a renewal (every
// TTL/3) delayed by a busy machine still lands in time.
func TestLeaseAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ttl = 2 * time.Second
	holder := startChild(t, pgtest.Config(t, b.schema), "lease", map[string]string{"NAME": "nightly", "TTL": ttl.String()})
	first, _ := strconv.ParseInt(holder.expect(t, "acquired", 5*time.Second), 10, 64)
	c := newClient(t, b.pool, lock.Options{ID: "contender"})
	ctx := context.Background()
	acquired := time.Now()
	for tries := 0; time.Since(acquired) < 3*ttl; tries++ {
		_, err := c.TryLease(ctx, "nightly", ttl)
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryLease %s after a renewing holder took it: %v, want ErrNotAcquired", time.Since(acquired), err)
		}
		if tries == 0 && !strings.Contains(err.Error(), "child-") {
			t.Fatalf("the error does not name the holder: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // a pace, not a wait for a condition
	}
	_, leases, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 1 || leases[0].Name != "nightly" || leases[0].Token != first || leases[0].Expired() || !strings.HasPrefix(leases[0].Holder, "child-") {
		t.Fatalf("List leases = %+v, want nightly held by the child with token %d", leases, first)
	}
	holder.send(t, "release")
	holder.expect(t, "released", 5*time.Second)
	l, err := c.TryLease(ctx, "nightly", ttl)
	if err != nil {
		t.Fatalf("TryLease after the holder released it: %v", err)
	}
	if l.Token() <= first {
		t.Fatalf("token %d after %d: fencing tokens must grow", l.Token(), first)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseExpires: a lease not renewed expires: its holder's Context
// ends, another process takes it with a greater token, and the old
// holder's late renewal is refused.
func TestLeaseExpires(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ttl = time.Second
	holder := startChild(t, pgtest.Config(t, b.schema), "lease", map[string]string{"NAME": "nightly", "TTL": ttl.String(), "MANUAL": "1"})
	first, _ := strconv.ParseInt(holder.expect(t, "acquired", 5*time.Second), 10, 64)
	holder.send(t, "renew")
	holder.expect(t, "renewed", 5*time.Second)
	if cause := holder.expect(t, "lost", ttl); !strings.Contains(cause, "lock lost") || !strings.Contains(cause, "expired") {
		t.Fatalf("the holder's Context ended with %q, want an expiry", cause)
	}
	c := newClient(t, b.pool, lock.Options{ID: "successor"})
	actx, cancel := context.WithTimeout(context.Background(), pgtest.Patient(time.Second))
	defer cancel()
	l, err := c.AcquireLease(actx, "nightly", ttl)
	if err != nil {
		t.Fatalf("AcquireLease of an expired lease: %v", err)
	}
	if l.Token() <= first {
		t.Fatalf("token %d after %d: fencing tokens must grow", l.Token(), first)
	}
	holder.send(t, "renew")
	if got := holder.expect(t, "renew-failed", 5*time.Second); !strings.Contains(got, "lock lost") {
		t.Fatalf("late renewal: %s, want lock lost", got)
	}
}

// TestPartitionedHolder: a holder whose network goes silent (nothing
// forwarded, nothing closed) sees its lock's Context end within
// KeepaliveInterval + PingTimeout (100ms + 1s in the child); once the
// network is back, the lock is free at once, the holder having let go.
// Its lease ends at expiry, and another takes it meanwhile.
func TestPartitionedHolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := pgtest.Config(t, b.schema)
	link := pgtest.NewFreezer(t, cfg)
	holder := startChild(t, cfg, "hold", map[string]string{"NAME": "partition"})
	holder.expect(t, "acquired", 5*time.Second)
	leaser := startChild(t, cfg, "lease", map[string]string{"NAME": "partition", "TTL": "2s"})
	first, _ := strconv.ParseInt(leaser.expect(t, "acquired", 5*time.Second), 10, 64)
	c := newClient(t, b.pool, lock.Options{ID: "contender"})
	ctx := context.Background()

	link.Freeze()
	frozen := time.Now()
	if cause := holder.expect(t, "lost", 2*time.Second); !strings.Contains(cause, "lock lost") {
		t.Fatalf("the holder's Context ended with %q, want lock lost", cause)
	}
	t.Logf("a partitioned holder's lock Context ended %s after the network went silent (KeepaliveInterval 100ms, PingTimeout 1s)",
		time.Since(frozen).Round(time.Millisecond))
	if cause := leaser.expect(t, "lost", 2*time.Second); !strings.Contains(cause, "lock lost") {
		t.Fatalf("the lease holder's Context ended with %q, want lock lost", cause)
	}
	t.Logf("a partitioned lease holder's Context ended %s after the network went silent (TTL 2s)", time.Since(frozen).Round(time.Millisecond))
	actx, cancel := context.WithTimeout(ctx, pgtest.Patient(2*time.Second))
	defer cancel()
	l, err := c.AcquireLease(actx, "partition", 2*time.Second)
	if err != nil {
		t.Fatalf("AcquireLease while its holder is cut off: %v", err)
	}
	if l.Token() <= first {
		t.Fatalf("token %d after %d: fencing tokens must grow", l.Token(), first)
	}

	link.Unfreeze()
	healed := time.Now()
	actx, cancel = context.WithTimeout(ctx, pgtest.Patient(time.Second))
	defer cancel()
	s, err := c.Acquire(actx, "partition", lock.Exclusive)
	if err != nil {
		t.Fatalf("Acquire once the network is back: %v", err)
	}
	t.Logf("the session lock was free %s after the network came back", time.Since(healed).Round(time.Millisecond))
	leaser.send(t, "renew")
	if got := leaser.expect(t, "renew-failed", 5*time.Second); !strings.Contains(got, "lock lost") {
		t.Fatalf("the cut-off lease holder's renewal: %s, want lock lost", got)
	}
	s.Release(ctx)
	l.Release(ctx)
}
