package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/worker/lock"
)

// TestNotMigrated: a lease on a schema without skiplock_locks gets
// migrations.ErrNotMigrated, whose message names the command to run.
func TestNotMigrated(t *testing.T) {
	t.Parallel()
	c := newClient(t, pgtest.NewPool(t, pgtest.Schema(t, false)), lock.Options{})
	_, err := c.TryLease(context.Background(), "a", time.Minute)
	if !errors.Is(err, migrations.ErrNotMigrated) || !strings.Contains(err.Error(), "skiplock migrate up") {
		t.Fatalf("TryLease on an unmigrated schema: %v, want migrations.ErrNotMigrated", err)
	}
}

// TestBadInput: each bad argument gets one error wrapping ErrInvalid that
// names it, and nothing is taken.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := newClient(t, b.pool, lock.Options{})
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, tc := range []struct {
		what string
		err  error
		want string
	}{
		{"empty name", func() error { _, err := c.TryAcquire(ctx, "", lock.Exclusive); return err }(), "lock name is empty"},
		{"long name", func() error { _, err := c.TryAcquire(ctx, strings.Repeat("x", 513), lock.Exclusive); return err }(), "513 bytes long, over 512"},
		{"bad UTF-8", func() error { _, err := c.TryAcquire(ctx, "a\xff", lock.Exclusive); return err }(), "not valid UTF-8"},
		{"NUL", func() error { _, err := c.TryAcquire(ctx, "a\x00b", lock.Exclusive); return err }(), "NUL byte"},
		{"bad mode", func() error { _, err := c.TryAcquire(ctx, "a", lock.Mode(7)); return err }(), "mode 7 is neither"},
		{"short TTL", func() error { _, err := c.TryLease(ctx, "a", 500*time.Millisecond); return err }(), "lease TTL 500ms is shorter than the minimum 1s"},
		{"tx empty name", lock.TryInTx(ctx, tx, "", lock.Shared), "lock name is empty"},
		{"nil tx", lock.TryInTx(ctx, nil, "a", lock.Shared), "needs a transaction"},
		{"RunOnce nil", func() error { _, err := lock.RunOnce(ctx, c, "a", nil); return err }(), "needs a client and a function"},
		{"negative option", func() error { _, err := lock.New(b.pool, lock.Options{PingTimeout: -1}); return err }(), "Options.PingTimeout is negative"},
		{"nil pool", func() error { _, err := lock.New(nil, lock.Options{}); return err }(), "needs a pool"},
	} {
		if !errors.Is(tc.err, lock.ErrInvalid) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", tc.what, tc.err, tc.want)
		}
	}
	if locks, leases, err := c.List(ctx); err != nil || len(locks)+len(leases) != 0 {
		t.Fatalf("List after bad input = %v, %v, %v; want nothing held", locks, leases, err)
	}
}

// TestModes: shared holders share, an exclusive one excludes them and
// others, within one client as between two.
func TestModes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c1, c2 := newClient(t, b.pool, lock.Options{}), newClient(t, b.pool, lock.Options{})
	ctx := context.Background()
	must := func(l *lock.Lock, err error) *lock.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	refused := func(what string, _ *lock.Lock, err error) {
		t.Helper()
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("%s: %v, want ErrNotAcquired", what, err)
		}
	}
	s1 := must(c1.TryAcquire(ctx, "m", lock.Shared))
	s2 := must(c2.TryAcquire(ctx, "m", lock.Shared))
	s3 := must(c1.TryAcquire(ctx, "m", lock.Shared))
	l, err := c2.TryAcquire(ctx, "m", lock.Exclusive)
	refused("exclusive while shared", l, err)
	l, err = c1.TryAcquire(ctx, "m", lock.Exclusive)
	refused("exclusive while this client holds it shared", l, err)
	locks, _, err := c1.List(ctx)
	if err != nil || len(locks) != 2 || locks[0].Mode != lock.Shared {
		t.Fatalf("List = %+v, %v; want two sessions sharing m", locks, err)
	}
	for _, s := range []*lock.Lock{s1, s2, s3} {
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if cause := context.Cause(s.Context()); !errors.Is(cause, lock.ErrReleased) {
			t.Fatalf("Context cause after Release: %v", cause)
		}
	}
	x := must(c1.TryAcquire(ctx, "m", lock.Exclusive))
	l, err = c1.TryAcquire(ctx, "m", lock.Exclusive)
	refused("exclusive twice in one client", l, err)
	l, err = c2.TryAcquire(ctx, "m", lock.Shared)
	refused("shared while exclusive", l, err)
	// A waiter gets it once released.
	got := make(chan error, 1)
	go func() {
		l, err := c2.Acquire(ctx, "m", lock.Exclusive)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := x.Release(ctx); err != nil {
		t.Fatalf("a second Release: %v", err)
	}
	// A wait that reaches its context's deadline ends with ErrNotAcquired
	// and DeadlineExceeded, naming the lock; a cancelled one with the cause.
	x = must(c1.TryAcquire(ctx, "m", lock.Exclusive))
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	l, err = c2.Acquire(dctx, "m", lock.Exclusive)
	refused("a wait that reached its deadline", l, err)
	if want := `skiplock: lock not acquired: lock "m" was not free before the context's deadline: context deadline exceeded`; !errors.Is(err, context.DeadlineExceeded) || err.Error() != want {
		t.Fatalf("a wait that reached its deadline: %v, want %q wrapping context.DeadlineExceeded", err, want)
	}
	cctx, cancelWait := context.WithCancelCause(ctx)
	stop := errors.New("shutting down")
	time.AfterFunc(20*time.Millisecond, func() { cancelWait(stop) })
	if _, err := c2.Acquire(cctx, "m", lock.Exclusive); !errors.Is(err, stop) || errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("a wait whose context was cancelled: %v, want its cause and not ErrNotAcquired", err)
	}
	x.Release(ctx)
	// So does a lease's.
	lease, err := c1.TryLease(ctx, "m", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c2.AcquireLease(dctx, "m", time.Minute)
	if want := `skiplock: lock not acquired: lease "m" was not free before the context's deadline: context deadline exceeded`; !errors.Is(err, lock.ErrNotAcquired) ||
		!errors.Is(err, context.DeadlineExceeded) || err.Error() != want {
		t.Fatalf("a lease wait that reached its deadline: %v, want %q wrapping ErrNotAcquired and context.DeadlineExceeded", err, want)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSessionEnded: a session the server ends loses its locks; their
// Contexts end with ErrLockLost, Release says so, and the client takes
// locks again on a new session.
func TestSessionEnded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := newClient(t, b.pool, lock.Options{ID: "ended", KeepaliveInterval: 50 * time.Millisecond})
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "e", lock.Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'skiplock lock ended'"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Context().Done():
	case <-time.After(pgtest.Patient(time.Second)):
		t.Fatal("the lock's Context did not end with its session")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, lock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Release of a lost lock: %v, want ErrLockLost", err)
	}
	l, err = c.TryAcquire(ctx, "e", lock.Exclusive)
	if err != nil {
		t.Fatalf("TryAcquire on a new session: %v", err)
	}
	c.Close()
	if cause := context.Cause(l.Context()); !errors.Is(cause, lock.ErrClosed) {
		t.Fatalf("cause after Close: %v, want ErrClosed", cause)
	}
	if _, err := c.TryAcquire(ctx, "e", lock.Exclusive); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v, want ErrClosed", err)
	}
	if locks, _, _ := newClient(t, b.pool, lock.Options{}).List(ctx); len(locks) != 0 {
		t.Fatalf("locks held after Close: %+v", locks)
	}
}

// TestInTx: a transaction lock excludes session locks of its name until
// the transaction ends.
func TestInTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := newClient(t, b.pool, lock.Options{})
	ctx := context.Background()
	begin := func() pgx.Tx {
		t.Helper()
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(ctx) })
		return tx
	}
	// The first use records the name, with the transaction.
	tx := begin()
	if err := lock.TryInTx(ctx, tx, "tx", lock.Exclusive); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	tx = begin()
	if err := lock.InTx(ctx, tx, "tx", lock.Exclusive); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "tx", lock.Shared); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while a transaction holds it: %v", err)
	}
	tx2 := begin()
	if err := lock.TryInTx(ctx, tx2, "tx", lock.Shared); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryInTx while another transaction holds it: %v", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := lock.InTx(dctx, begin(), "tx", lock.Shared); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("InTx that reached its context's deadline: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
	}
	locks, _, err := c.List(ctx)
	if err != nil || len(locks) != 1 || len(locks[0].Names) != 1 || locks[0].Names[0] != "tx" {
		t.Fatalf("List = %+v, %v; want tx", locks, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.TryInTx(ctx, tx2, "tx", lock.Shared); err != nil {
		t.Fatalf("TryInTx once the other committed: %v", err)
	}
	tx2.Rollback(ctx)
	l, err := c.TryAcquire(ctx, "tx", lock.Exclusive)
	if err != nil {
		t.Fatalf("TryAcquire once the transactions ended: %v", err)
	}
	l.Release(ctx)
}

// TestRunOnce: of many callers at once, one runs; its context ends if the
// lock is lost.
func TestRunOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var runs atomic.Int32
	release := make(chan struct{})
	results := make(chan bool, 4)
	for range 4 {
		c := newClient(t, b.pool, lock.Options{})
		go func() {
			ran, err := lock.RunOnce(ctx, c, "daily_report", func(ctx context.Context) error {
				runs.Add(1)
				<-release
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			results <- ran
		}()
	}
	// The three that skip return while the one that runs is inside.
	for range 3 {
		if <-results {
			t.Fatal("a second caller ran the job")
		}
	}
	close(release)
	if !<-results || runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1", runs.Load())
	}
	// A lost lock ends the job's context and RunOnce says so.
	c := newClient(t, b.pool, lock.Options{ID: "runonce-lost", KeepaliveInterval: 50 * time.Millisecond})
	ran, err := lock.RunOnce(ctx, c, "daily_report", func(ctx context.Context) error {
		b.pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'skiplock lock runonce-lost'")
		<-ctx.Done()
		return nil
	})
	if !ran || !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("RunOnce that lost its lock: %v, %v; want true, ErrLockLost", ran, err)
	}
}

// TestSharedKey: two names with the same key exclude each other, and the
// listing names both.
func TestSharedKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Found by hashing name-0, name-1, ... (a second under -race would
	// not do: 880,000 names).
	n1, n2 := "name-69228", "name-883176"
	if lock.Key(n1) != lock.Key(n2) {
		t.Fatalf("Key(%s) = %d, Key(%s) = %d: the hash changed", n1, lock.Key(n1), n2, lock.Key(n2))
	}
	c1, c2 := newClient(t, b.pool, lock.Options{}), newClient(t, b.pool, lock.Options{})
	ctx := context.Background()
	l2, err := c2.TryAcquire(ctx, n2, lock.Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.TryAcquire(ctx, n1, lock.Exclusive); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("%s while %s (same key) is held: %v, want ErrNotAcquired", n1, n2, err)
	}
	listed(t, c1, fmt.Sprintf("one lock named %s and %s", n1, n2), func(locks []lock.HeldLock) bool {
		return len(locks) == 1 && len(locks[0].Names) == 2
	})
	l2.Release(ctx)
}

// listed waits until c's List satisfies ok: a client records a lock's
// name in the background, so the listing may name it a moment after the
// lock is tried.
func listed(t *testing.T, c *lock.Client, what string, ok func([]lock.HeldLock) bool) []lock.HeldLock {
	t.Helper()
	deadline := time.Now().Add(pgtest.Patient(time.Second))
	for {
		locks, _, err := c.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ok(locks) {
			return locks
		}
		if time.Now().After(deadline) {
			t.Fatalf("List = %+v, want %s", locks, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
