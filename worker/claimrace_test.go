package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/queue"
)

// TestClaimLeavesOthersRowsUnlocked races claimers on one backlog, each on
// a session of its own that keeps what it takes, and then looks at the
// rows they took. A claim whose snapshot predates another's commit sees
// that claim's rows as still pending; if FOR UPDATE reaches one, it locks
// the running row (and keeps the lock until it commits, which the task's
// outcome write then waits for) before finding that it no longer matches.
// A running row that carries such a lock has an xmax other than its xmin:
// its claim locked it, and its update carried that lock over. The claim statements leave those rows out in their scan; the
// statements without that left xmax on 5-30% of the rows here. A claimer
// that reads a row just before its claimer locks the task and finds it
// locked just after that claimer commits can still take such a lock, so
// the test allows for a few.
func TestClaimLeavesOthersRowsUnlocked(t *testing.T) {
	t.Parallel()
	claims := []struct {
		name  string
		claim func(context.Context, *db.Queries, db.DBTX, db.TaskClaimParams) ([]db.TaskClaimRow, error)
	}{
		{"plain", func(ctx context.Context, q *db.Queries, tx db.DBTX, p db.TaskClaimParams) ([]db.TaskClaimRow, error) {
			return claimPlain(ctx, q, tx, p, 0)
		}},
		{"queue", claimQueue},
		{"limited", func(ctx context.Context, q *db.Queries, tx db.DBTX, p db.TaskClaimParams) ([]db.TaskClaimRow, error) {
			return q.TaskClaim(ctx, tx, p)
		}},
	}
	for _, c := range claims {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setupJobs(t)
			ctx := context.Background()
			const total, claimers, batch = 3000, 3, 20
			tasks := make([]queue.NewTask, total)
			for i := range tasks {
				tasks[i] = queue.NewTask{Name: "race"}
			}
			if _, err := b.client.EnqueueMany(ctx, tasks); err != nil {
				t.Fatal(err)
			}

			var (
				mu    sync.Mutex
				taken = map[int64]string{}
				wg    sync.WaitGroup
				errs  = make(chan error, claimers)
			)
			deadline := time.Now().Add(2 * time.Minute)
			for i := range claimers {
				// A connection of its own, closed at the end: the advisory
				// locks it takes go with its session.
				conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				id := fmt.Sprintf("racer-%d", i)
				wg.Go(func() {
					for time.Now().Before(deadline) {
						rows, err := c.claim(ctx, b.queries, conn, db.TaskClaimParams{
							WorkerID: id, LockClass: int32(b.schema.TableOID), UnlockIds: []int64{},
							UnlockLimitLocks: []int32{}, HeldLimitLocks: []int32{}, HeldLimitCounts: []int32{},
							OnlyIds: []int64{}, Queue: "default", OnlyNames: []string{}, SkipNames: []string{},
							Max: batch, ExclusiveSeed: b.schema.TableOID,
						})
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						for _, r := range rows {
							if other, ok := taken[r.ID]; ok {
								mu.Unlock()
								errs <- fmt.Errorf("task %d taken by %s and %s", r.ID, other, id)
								return
							}
							taken[r.ID] = id
						}
						done := len(taken) == total
						mu.Unlock()
						if done {
							return
						}
					}
					errs <- fmt.Errorf("%s: the backlog was not taken in 2 minutes", id)
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			var running, locked int
			if err := b.pool.QueryRow(ctx,
				`SELECT count(*), count(*) FILTER (WHERE xmax <> xmin) FROM skiplock_tasks WHERE status = 'running'`,
			).Scan(&running, &locked); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d running rows, %d locked by another claim", running, locked)
			if running != total {
				t.Fatalf("%d tasks running, want %d", running, total)
			}
			if locked > total/100 {
				t.Fatalf("%d of %d running rows were locked by a claim that did not take them", locked, total)
			}
		})
	}
}
