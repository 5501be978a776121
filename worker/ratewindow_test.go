package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
)

// TestRateTakeAcrossWindowTurn has a take read the clock in one window
// and reach the limit's row only after another take, in the next window,
// has used that window's whole budget: the late take must get nothing, or
// the next window would start more tasks than the limit. A session holding
// the row's lock stands for the other take's statement, which the late
// one queues behind; it then takes the new window's budget itself.
func TestRateTakeAcrossWindowTurn(t *testing.T) {
	t.Parallel()
	const lim = 2
	takes := []struct {
		name string
		// seed enqueues what the take needs and takes some budget in the
		// current window; take takes want on tx and returns the grant;
		// lockRow locks the limit's row on tx.
		seed    func(t *testing.T, b *jobsBundle)
		take    func(ctx context.Context, b *jobsBundle, tx db.DBTX, want int32) (int, error)
		lockRow string
	}{
		{
			name: "limit",
			seed: func(t *testing.T, b *jobsBundle) {
				if _, err := b.queries.RateLimitTake(context.Background(), b.pool, db.RateLimitTakeParams{Key: "queue:q", Want: 1, Lim: lim, PeriodSeconds: 1}); err != nil {
					t.Fatal(err)
				}
			},
			take: func(ctx context.Context, b *jobsBundle, tx db.DBTX, want int32) (int, error) {
				row, err := b.queries.RateLimitTake(ctx, tx, db.RateLimitTakeParams{Key: "queue:q", Want: want, Lim: lim, PeriodSeconds: 1})
				return int(row.LastGranted), err
			},
			lockRow: "SELECT 1 FROM skiplock_rate_limits WHERE key = 'queue:q' FOR UPDATE",
		},
		{
			name: "per key",
			seed: func(t *testing.T, b *jobsBundle) {
				for range 4 {
					if _, err := b.client.Enqueue(context.Background(), "job", nil, queue.WithLimitKey("k")); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := b.queries.RateKeyTake(context.Background(), b.pool, db.RateKeyTakeParams{
					Scope: "name:job", Queue: "default", Name: "job", Lim: lim, PeriodSeconds: 1, Want: 1, Scan: 100,
				}); err != nil {
					t.Fatal(err)
				}
			},
			take: func(ctx context.Context, b *jobsBundle, tx db.DBTX, want int32) (int, error) {
				row, err := b.queries.RateKeyTake(ctx, tx, db.RateKeyTakeParams{
					Scope: "name:job", Queue: "default", Name: "job", Lim: lim, PeriodSeconds: 1, Want: want, Scan: 100,
				})
				return len(row.Ids), err
			},
			lockRow: "SELECT 1 FROM skiplock_rate_keys WHERE scope = 'name:job' AND key = 'k' FOR UPDATE",
		},
	}
	for _, tc := range takes {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupJobs(t)
			ctx := context.Background()
			// A busy machine may let the window turn before the late take
			// is seen waiting; then the round is tried again.
			for attempt := 1; ; attempt++ {
				// Early in a window (the database's clock is this machine's).
				now := time.Now()
				if now.Sub(now.Truncate(time.Second)) > 300*time.Millisecond {
					time.Sleep(now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond).Sub(now))
				}
				window := time.Now().Truncate(time.Second)
				tc.seed(t, b)
				holder, err := b.pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// Ends the late take's wait should the test stop first.
				defer holder.Rollback(ctx)
				if _, err := holder.Exec(ctx, tc.lockRow); err != nil {
					t.Fatal(err)
				}
				conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				var pid int32
				if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					t.Fatal(err)
				}
				late := make(chan int, 1)
				lateErr := make(chan error, 1)
				go func() {
					n, err := tc.take(ctx, b, conn, lim)
					lateErr <- err
					late <- n
				}()
				waiting := false
				for !waiting && time.Now().Before(window.Add(time.Second)) {
					if err := b.pool.QueryRow(ctx, "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting); err != nil {
						t.Fatal(err)
					}
					if !waiting {
						time.Sleep(2 * time.Millisecond)
					}
				}
				// Into the next window; the holder takes its whole budget.
				time.Sleep(time.Until(window.Add(time.Second + 50*time.Millisecond)))
				granted, err := tc.take(ctx, b, holder, lim)
				if err != nil {
					t.Fatal(err)
				}
				if err := holder.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-lateErr; err != nil {
					t.Fatal(err)
				}
				lateGranted := <-late
				if !waiting {
					if attempt == 5 {
						t.Fatal("the late take was never seen waiting within its window in 5 rounds")
					}
					b.exec(t, "DELETE FROM skiplock_rate_limits; DELETE FROM skiplock_rate_keys; DELETE FROM skiplock_tasks")
					continue
				}
				if granted != lim {
					t.Fatalf("the take in the new window was granted %d, want %d", granted, lim)
				}
				if lateGranted != 0 {
					t.Fatalf("a take that read the clock in the window before was granted %d after the new window's %d: %d starts in a window of limit %d",
						lateGranted, granted, lateGranted+granted, lim)
				}
				return
			}
		})
	}
}
