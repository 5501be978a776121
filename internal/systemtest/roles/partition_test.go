package roles

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

// TestRescuerEndsCutOffWorker: a worker cut off from the database by a
// silent network keeps its lock session alive on the server, holding its
// task's lock. The other worker ends that session (pg_terminate_backend)
// once the cut-off worker's heartbeat is stale, and runs the task, when it
// may signal the session: under the same role, or under another role with
// the optional grants of `skiplock migrate grants --kind worker`. Under
// another role without them it says once what to grant and leaves the
// session alone.
func TestRescuerEndsCutOffWorker(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		otherRole   bool // B runs as a role of its own
		optional    bool // with OptionalGrants
		terminated  bool
		wantLogLine string
	}{
		{name: "same role", terminated: true, wantLogLine: "ended the lock session of a worker whose heartbeat is stale"},
		{name: "another role", otherRole: true, wantLogLine: "cannot end the lock session of a worker whose heartbeat is stale"},
		{name: "another role with pg_signal_backend", otherRole: true, optional: true, terminated: true,
			wantLogLine: "ended the lock session of a worker whose heartbeat is stale"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			// Timers short for a test, not so short that a ping on a
			// loaded machine times out while the network is fine.
			const stale, ping = 4 * time.Second, time.Second
			roleA := pgtest.Role(t, b.schema, migrations.Worker)
			roleB := roleA
			if c.otherRole {
				roleB = pgtest.Role(t, b.schema, migrations.Worker)
			}
			if c.optional {
				grants, err := migrations.OptionalGrants(roleB, migrations.Worker)
				if err != nil || len(grants) != 1 {
					t.Fatalf("OptionalGrants: %+v, %v", grants, err)
				}
				if _, err := b.admin.Exec(ctx, grants[0].SQL); err != nil {
					t.Fatalf("%s: %v", grants[0].SQL, err)
				}
			}

			cfgA := pgtest.ConfigAs(t, b.schema, roleA)
			link := pgtest.NewFreezer(t, cfgA)
			var logsA, logsB logBuffer
			a, _ := start(t, pgtest.PoolFromConfig(t, cfgA), worker.Config{
				Concurrency: 1, StaleAfter: stale, PingTimeout: ping, Logger: logsA.logger(),
			}, worker.Handlers{"hold": func(ctx context.Context, _ *worker.Task) error {
				<-ctx.Done()
				return ctx.Err()
			}})
			t.Cleanup(link.Unfreeze) // before A stops
			id, err := b.client.Enqueue(ctx, "hold", nil)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "A running the task", func() bool { return b.get(t, id.ID).WorkerID == a.ID() })
			bw, _ := start(t, pgtest.PoolAs(t, b.schema, roleB), worker.Config{
				StaleAfter: stale, PingTimeout: ping, Logger: logsB.logger(),
			}, worker.Handlers{"hold": func(context.Context, *worker.Task) error { return nil }})
			zombie := lockPID(t, b.admin, a.ID())
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("A's log:\n%s\nB's log:\n%s", logsA.String(), logsB.String())
				}
			})

			link.Freeze()
			waitFor(t, 20*time.Second, "B's log line", func() bool { return strings.Contains(logsB.String(), c.wantLogLine) })
			if c.terminated {
				waitFor(t, 10*time.Second, "B completing A's task", func() bool {
					task := b.get(t, id.ID)
					return task.Status == queue.StatusCompleted && task.WorkerID == bw.ID()
				})
				if alive(t, b.admin, zombie) {
					t.Fatalf("A's lock session (backend %d) is still alive", zombie)
				}
				return
			}
			// B warned: it names the grant and the role to grant it to,
			// and leaves the session and its task alone.
			want := "GRANT pg_signal_backend, pg_read_all_stats TO \"" + roleB + "\""
			if !strings.Contains(strings.ReplaceAll(logsB.String(), `\"`, `"`), want) {
				t.Fatalf("B's warning does not say %q:\n%s", want, logsB.String())
			}
			if !alive(t, b.admin, zombie) {
				t.Fatalf("A's lock session (backend %d) was ended by another role", zombie)
			}
			if task := b.get(t, id.ID); task.Status != queue.StatusRunning || task.WorkerID != a.ID() {
				t.Fatalf("task %s by %s, want still running by A: its lock is held", task.Status, task.WorkerID)
			}
			// Once: B's heartbeats go on (each a round of its health
			// check, as are its tries to take over), and it says no more.
			beats := heartbeats(t, b.admin, bw.ID())
			waitFor(t, 10*time.Second, "three more heartbeats of B", func() bool { return heartbeats(t, b.admin, bw.ID()).After(beats.Add(3 * stale / 5)) })
			if n := strings.Count(logsB.String(), c.wantLogLine); n != 1 {
				t.Fatalf("B warned %d times, want once:\n%s", n, logsB.String())
			}
			noDenials(t, &logsA)
		})
	}
}

func lockPID(t *testing.T, admin *pgxpool.Pool, workerID string) int32 {
	t.Helper()
	var pid int32
	if err := admin.QueryRow(context.Background(), "SELECT lock_backend_pid FROM skiplock_workers WHERE id = $1", workerID).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func alive(t *testing.T, admin *pgxpool.Pool, pid int32) bool {
	t.Helper()
	var n int
	if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func heartbeats(t *testing.T, admin *pgxpool.Pool, workerID string) time.Time {
	t.Helper()
	var at time.Time
	if err := admin.QueryRow(context.Background(), "SELECT heartbeat_at FROM skiplock_workers WHERE id = $1", workerID).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}
