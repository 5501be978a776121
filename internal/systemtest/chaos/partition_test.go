package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/devpg"
	"github.com/skiplock/skiplock/internal/testinfra/netns"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// The partition scenario: one worker process in a network namespace of its
// own, two on loopback, tasks of partitionWork each. Mid-run the namespace
// goes silent (iptables DROP: no FIN, no RST) for partitionFor, then heals;
// then a loopback worker is SIGKILLed.
const (
	partitionFor   = 30 * time.Second
	partitionWork  = 200 * time.Millisecond
	partitionLease = 10 * time.Second // lease mode's LeaseDuration
)

// TestPartition: advisory mode. The cut-off worker holds the rescuer's
// election at the cut, so its zombie session would stop every rescue
// anywhere unless it is ended; TCP keepalives on the server's side and the
// stale-heartbeat termination both do that within the default bounds
// (about 12s and 15s).
func TestPartition(t *testing.T) {
	runPartitions(t, "advisory")
	if *long && !t.Failed() {
		// The second line of defence alone: the cut-off worker asks for
		// no keepalives, so only the rescuer's ending its session (its
		// heartbeat stale after 15s) frees its tasks.
		runPartitions(t, "advisory-heartbeat")
	}
}

// TestPartitionLease: lease mode, where the lease expiry bounds the rescue.
func TestPartitionLease(t *testing.T) { runPartitions(t, "lease") }

func runPartitions(t *testing.T, mode string) {
	runs := 1
	if *long {
		runs = 3
	}
	var all []partitionFigures
	for i := range runs {
		f := runPartition(t, mode)
		f.run = i + 1
		t.Log(f)
		all = append(all, f)
		if t.Failed() {
			return
		}
	}
	if runs > 1 {
		var rescueMax, detect, release []time.Duration
		for _, f := range all {
			rescueMax, detect, release = append(rescueMax, f.rescueMax), append(detect, f.clientDetect), append(release, f.serverRelease)
		}
		t.Logf("partition summary mode=%s runs=%d rescue_max=%v client_detect=%v server_release=%v", mode, runs, rescueMax, detect, release)
	}
}

// partitionFigures are one run's measurements, logged as one line of
// key=value pairs.
type partitionFigures struct {
	mode          string
	run           int
	orphans       int           // tasks the cut-off worker held at the cut
	rescueP50     time.Duration // cut to the orphans' next start elsewhere
	rescueMax     time.Duration
	clientDetect  time.Duration // cut to the cut-off worker's first word of it
	serverRelease time.Duration // cut to the end of its lock session on the server (advisory)
	releasedBy    string        // "terminated" (stale heartbeat) or "tcp" (the server's keepalives)
	duplicates    int           // tasks whose handler ran to the end more than once
	healReclaim   time.Duration // heal to the cut-off worker's next start
	killed        int           // tasks of the SIGKILLed worker
	killP50       time.Duration
	killMax       time.Duration
}

func (f partitionFigures) String() string {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	return fmt.Sprintf("partition figures: mode=%s run=%d orphans=%d rescue_p50_ms=%d rescue_max_ms=%d client_detect_ms=%d "+
		"server_release_ms=%d released_by=%s duplicates=%d heal_reclaim_ms=%d killed=%d kill_rescue_p50_ms=%d kill_rescue_max_ms=%d",
		f.mode, f.run, f.orphans, ms(f.rescueP50), ms(f.rescueMax), ms(f.clientDetect),
		ms(f.serverRelease), f.releasedBy, f.duplicates, ms(f.healReclaim), f.killed, ms(f.killP50), ms(f.killMax))
}

func runPartition(t *testing.T, variant string) partitionFigures {
	fig := partitionFigures{mode: variant, releasedBy: "n/a"}
	mode, noTCP := variant, "0"
	if variant == "advisory-heartbeat" {
		mode, noTCP = "advisory", "1"
	}
	ctx := context.Background()

	host, err := netns.New()
	if err != nil {
		t.Fatal(err) // says what to install
	}
	defer host.Close()
	srv, err := devpg.Find(ctx, devpg.Options{Listen: []netip.Prefix{host.Local}, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	pool, err := pgxpool.New(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, createRuns)
	if err != nil {
		t.Fatal(err)
	}

	// A backlog that lasts as long as the scenario does, whatever the
	// machine's speed.
	feedCtx, stopFeed := context.WithCancel(ctx)
	feeding := make(chan struct{})
	go func() {
		defer close(feeding)
		client := queue.New(pool)
		for feedCtx.Err() == nil {
			var pending int
			if err := pool.QueryRow(feedCtx, "SELECT count(*) FROM skiplock_tasks WHERE status = 'pending'").Scan(&pending); err == nil && pending < 300 {
				batch := make([]queue.NewTask, 300)
				for i := range batch {
					batch[i] = queue.NewTask{Name: "chaos", Payload: i}
				}
				if _, err := client.EnqueueMany(feedCtx, batch); err != nil && feedCtx.Err() == nil {
					t.Errorf("enqueueing: %v", err)
					return
				}
			}
			select {
			case <-feedCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() { stopFeed(); <-feeding }()

	nsURL := srv.URLOn(host.Local.Addr())
	var procs []*proc
	spawn := func(id string, inNamespace bool) *proc {
		url, cmd := srv.URL, exec.Command(os.Args[0], "-test.run=^$")
		if inNamespace {
			url, cmd = nsURL, host.Command(os.Args[0], "-test.run=^$")
		}
		env := []string{envURL + "=" + url, envWork + "=" + fmt.Sprint(partitionWork.Milliseconds()),
			envFixed + "=1", envLog + "=info", envMode + "=" + mode, envListen + "=" + url, envLease + "=" + fmt.Sprint(partitionLease.Milliseconds())}
		if inNamespace {
			env = append(env, envNoTCP+"="+noTCP)
		}
		p := startProc(t, id, cmd, env...)
		procs = append(procs, p)
		return p
	}
	defer func() {
		for _, p := range procs {
			p.Cmd.Process.Kill()
		}
		if t.Failed() {
			for _, p := range procs {
				t.Logf("output of %s:\n%s", p.ID, tail(p.Out.String()))
			}
		}
	}()
	count := func(query string, args ...any) int {
		var n int
		if err := pool.QueryRow(ctx, query, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return n
	}

	// The cut-off worker starts first and so is elected rescuer: at the
	// cut its session holds the election as well as its tasks' locks.
	cut := spawn("part-ns", true)
	leads := `SELECT count(*) FROM pg_locks l JOIN skiplock_workers w ON w.lock_backend_pid = l.pid
		WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND l.objid = 1
		  AND l.classid = 'skiplock_tasks'::regclass::oid AND w.id = $1`
	if mode == "lease" {
		leads = `SELECT count(*) FROM skiplock_leaders WHERE job = 'rescuer' AND holder = $1 AND expires_at > now()`
	}
	pgtest.Eventually(t, 5*time.Second, "the worker in the namespace elected rescuer", func() bool { return count(leads, cut.ID) == 1 })
	lo1, lo2 := spawn("part-lo1", false), spawn("part-lo2", false)
	runningOn := func(id string) int {
		return count("SELECT count(*) FROM skiplock_tasks WHERE status = 'running' AND worker_id = $1", id)
	}
	var lockPID int32
	var cutAt time.Time
	var atCut []int64
	for try := 1; ; try++ {
		pgtest.Eventually(t, 5*time.Second, "every worker running tasks", func() bool {
			return count("SELECT count(*) FROM chaos_runs WHERE worker_id = $1 AND finished_at IS NOT NULL", cut.ID) > 0 &&
				runningOn(cut.ID) >= 4 && runningOn(lo1.ID) > 0 && runningOn(lo2.ID) > 0
		})
		if mode == "advisory" {
			if err := pool.QueryRow(ctx, "SELECT lock_backend_pid FROM skiplock_workers WHERE id = $1", cut.ID).Scan(&lockPID); err != nil {
				t.Fatal(err)
			}
		}
		cutAt = time.Now()
		if err := host.Blackhole(); err != nil {
			t.Fatal(err)
		}
		rows, err := pool.Query(ctx, "SELECT id FROM skiplock_tasks WHERE status = 'running' AND worker_id = $1", cut.ID)
		if err != nil {
			t.Fatal(err)
		}
		if atCut, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			t.Fatal(err)
		}
		if len(atCut) > 0 || try == 3 {
			break
		}
		// Its batch of tasks ended, and the next claim had not reached
		// the server, between the look above and the cut (a busy
		// machine makes that gap long): heal at once, which its
		// connections ride out, and cut again.
		t.Logf("%s: no task running in the namespace at cut %d; healing and cutting again", mode, try)
		if err := host.Heal(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s: namespace blackholed with %d tasks running in it", mode, len(atCut))

	// The partition lasts partitionFor, whatever happens: meanwhile, watch
	// (every 100 ms) for the server ending the cut-off session.
	var serverEnd time.Time
	healTime, watch := time.After(partitionFor-time.Since(cutAt)), time.NewTicker(100*time.Millisecond)
	for partitioned := true; partitioned; {
		select {
		case <-healTime:
			partitioned = false
		case <-watch.C:
			if mode == "advisory" && serverEnd.IsZero() && count("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", lockPID) == 0 {
				serverEnd = time.Now()
			}
		}
	}
	watch.Stop()
	healAt := time.Now()
	if err := host.Heal(); err != nil {
		t.Fatal(err)
	}
	if mode == "advisory" {
		if serverEnd.IsZero() {
			t.Errorf("the cut-off worker's lock session (backend %d) outlived the %s partition", lockPID, partitionFor)
		} else {
			fig.serverRelease = serverEnd.Sub(cutAt)
		}
	}

	// After the heal the cut-off worker works again, without a restart.
	pgtest.Eventually(t, 2*time.Second, "the healed worker claiming again", func() bool {
		return count("SELECT count(*) FROM chaos_runs WHERE worker_id = $1 AND started_at > $2", cut.ID, healAt) > 0
	})
	var reclaim time.Time
	if err := pool.QueryRow(ctx, "SELECT min(started_at) FROM chaos_runs WHERE worker_id = $1 AND started_at > $2", cut.ID, healAt).Scan(&reclaim); err != nil {
		t.Fatal(err)
	}
	fig.healReclaim = reclaim.Sub(healAt)

	// A crash after the heal is rescued as usual: no zombie holds the
	// rescuer's election any more.
	killAt := time.Now()
	if err := lo1.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-lo1.Done()
	waitReporting(t, 15*time.Second, "the SIGKILLed worker's tasks rescued", func() bool { return runningOn(lo1.ID) == 0 },
		func() string { return partitionReport(ctx, pool, procs, killAt) })

	stopFeed()
	<-feeding
	pgtest.Eventually(t, 10*time.Second, "every task completed", func() bool {
		return count("SELECT count(*) FROM skiplock_tasks WHERE status <> 'completed'") == 0
	})
	stopGracefully(t, cut, lo2)

	// The ledger.
	if n := count(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`); n != 0 {
		t.Errorf("%d advisory locks left after every worker stopped", n)
	}
	if n := count(`SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'skiplock lock session%'`); n != 0 {
		t.Errorf("%d lock sessions left after every worker stopped", n)
	}
	if n := count(`SELECT count(*) FROM skiplock_tasks t
		WHERE NOT EXISTS (SELECT 1 FROM chaos_runs r WHERE r.task_id = t.id AND r.attempt = t.attempt
		                  AND r.worker_id = t.worker_id AND r.finished_at IS NOT NULL)`); n != 0 {
		t.Errorf("%d tasks' completion is not that of their last claim", n)
	}
	// Tasks that lost their worker: those running in the namespace at the
	// cut, and any whose history names the cut-off worker (a claim in
	// flight at the cut commits on the server, and its rows never arrive).
	disrupted := func(worker string) map[int64]bool {
		rows, err := pool.Query(ctx, `SELECT DISTINCT t.id FROM skiplock_tasks t, jsonb_array_elements(t.errors) e
			WHERE e->>'worker_id' = $1`, worker)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		set := map[int64]bool{}
		for _, id := range ids {
			set[id] = true
		}
		return set
	}
	orphans, crashed := disrupted(cut.ID), disrupted(lo1.ID)
	for _, id := range atCut {
		if orphans[id] {
			continue
		}
		// An outcome the cut-off worker sent just before the cut can
		// commit after atCut was read: nothing of that worker reaches the
		// server between the cut and the heal, so a completion of its
		// written before the heal was in flight at the cut.
		var landed bool
		if err := pool.QueryRow(ctx, `SELECT status = 'completed' AND worker_id = $2 AND finished_at < $3
			FROM skiplock_tasks WHERE id = $1`, id, cut.ID, healAt).Scan(&landed); err != nil {
			t.Fatal(err)
		}
		if !landed {
			t.Errorf("task %d was running in the namespace at the cut, but its history does not show it rescued", id)
		}
	}
	fig.orphans = len(orphans)
	if len(orphans) == 0 {
		t.Error("no task was running in the namespace at the cut: the test measured nothing")
	}
	// The cut-off worker's completions of those attempts were fenced off.
	if n := count(`SELECT count(*) FROM skiplock_tasks t, jsonb_array_elements(t.errors) e
		WHERE t.worker_id = $1 AND e->>'worker_id' = $1 AND (e->>'attempt')::int = t.attempt`, cut.ID); n != 0 {
		t.Errorf("%d tasks completed by the cut-off worker in an attempt it had lost", n)
	}

	// Each orphan ran again elsewhere before the heal: rescue did not wait
	// for TCP retransmissions to get through after it.
	nextStart := func(id int64, after time.Time, not string) time.Time {
		var at *time.Time
		err := pool.QueryRow(ctx, "SELECT min(started_at) FROM chaos_runs WHERE task_id = $1 AND started_at > $2 AND worker_id <> $3",
			id, after, not).Scan(&at)
		if err != nil {
			t.Fatal(err)
		}
		if at == nil {
			return time.Time{}
		}
		return *at
	}
	var rescue []time.Duration
	for id := range orphans {
		next := nextStart(id, cutAt, cut.ID)
		switch {
		case next.IsZero():
			t.Errorf("task %d, orphaned by the cut, never ran again elsewhere", id)
		case !next.Before(healAt):
			t.Errorf("task %d, orphaned by the cut, ran again elsewhere only %s after it, after the heal", id, next.Sub(cutAt))
		default:
			rescue = append(rescue, next.Sub(cutAt))
		}
	}
	fig.rescueP50, fig.rescueMax = percentiles(rescue)

	var kill []time.Duration
	for id := range crashed {
		if next := nextStart(id, killAt, lo1.ID); !next.IsZero() {
			kill = append(kill, next.Sub(killAt))
		}
	}
	fig.killed = len(crashed)
	fig.killP50, fig.killMax = percentiles(kill)
	if len(crashed) == 0 {
		t.Error("the SIGKILLed worker had no task rescued: the test measured nothing")
	}

	// Only tasks that lost their worker ran twice.
	rows, err := pool.Query(ctx, `SELECT task_id FROM chaos_runs WHERE finished_at IS NOT NULL GROUP BY task_id HAVING count(*) > 1`)
	if err != nil {
		t.Fatal(err)
	}
	twice, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	fig.duplicates = len(twice)
	for _, id := range twice {
		if !orphans[id] && !crashed[id] {
			t.Errorf("task %d ran to the end twice, but neither the cut nor the crash took it from its worker", id)
		}
	}

	// When each side noticed.
	fig.clientDetect = firstLog(cut.Out.String(), "lock session", cutAt).Sub(cutAt)
	if mode == "lease" {
		// Its renewals fail while tasks run; a worker whose tasks all
		// ended before its first failed renewal learns of the loss when
		// their outcomes are refused instead.
		fig.clientDetect = firstLog(cut.Out.String(), "leases expired", cutAt).Sub(cutAt)
		if d := firstLog(cut.Out.String(), "outcomes discarded", cutAt).Sub(cutAt); d >= 0 && (fig.clientDetect < 0 || d < fig.clientDetect) {
			fig.clientDetect = d
		}
	}
	if fig.clientDetect < 0 {
		t.Errorf("the cut-off worker logged nothing about losing its %s", map[string]string{"advisory": "lock session", "lease": "leases"}[mode])
	}
	if mode == "advisory" {
		fig.releasedBy = "tcp"
		for _, p := range procs {
			if p != cut && strings.Contains(p.Out.String(), "lost_worker="+cut.ID+" backend_pid=") {
				fig.releasedBy = "terminated"
			}
		}
	}
	return fig
}

// firstLog returns the time of the first log line at or after since that
// contains what (slog's text format), or since minus one second.
func firstLog(out, what string, since time.Time) time.Time {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "time=")
		if !ok || !strings.Contains(line, what) {
			continue
		}
		stamp, _, _ := strings.Cut(rest, " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err == nil && !at.Before(since) {
			return at
		}
	}
	return since.Add(-time.Second)
}

func percentiles(d []time.Duration) (p50, worst time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], d[len(d)-1]
}

// waitReporting is pgtest.Eventually that, once the wait has taken twice
// as long as on an idle machine plus 30 seconds, logs report() once: where
// the run stands while it is stuck, not after the workers are gone.
func waitReporting(t *testing.T, within time.Duration, what string, cond func() bool, report func() string) {
	t.Helper()
	began, reported := time.Now(), false
	pgtest.Eventually(t, within, what, func() bool {
		if cond() {
			return true
		}
		if !reported && time.Since(began) > 2*within+30*time.Second {
			reported = true
			t.Logf("still waiting for %s after %s:\n%s", what, time.Since(began).Round(time.Millisecond), report())
		}
		return false
	})
}

// partitionReport is stallReport with the elections' holders: which
// session holds each election lock, from where, since when.
func partitionReport(ctx context.Context, pool *pgxpool.Pool, procs []*proc, since time.Time) string {
	var b strings.Builder
	rows, err := pool.Query(ctx, `SELECT l.objid, l.pid, w.id, a.application_name, a.client_addr::text, a.client_port,
		a.backend_start, a.state, a.wait_event_type || ':' || a.wait_event, (now() - a.state_change)::text, left(a.query, 80)
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid LEFT JOIN skiplock_workers w ON w.lock_backend_pid = l.pid
		WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.classid = 'skiplock_tasks'::regclass::oid`)
	b.WriteString("election locks (job, pid, worker, application, client, port, backend start, state, wait, for, query):\n")
	if err == nil {
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				break
			}
			fmt.Fprintf(&b, "  %v\n", vals)
		}
		rows.Close()
	}
	if err != nil {
		fmt.Fprintf(&b, "  (%v)\n", err)
	}
	m := map[int]*proc{}
	for i, p := range procs {
		m[i] = p
	}
	b.WriteString(stallReport(ctx, pool, m, nil, since, nil, progressMark{at: since}))
	return b.String()
}
