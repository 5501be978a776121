package cli_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// shardBundles returns a migrated schema of the test server for each shard
// number, stamped with it (0 stays unstamped): the shards of one sharded
// queue, in one server.
func shardBundles(t *testing.T, shards ...int) []*bundle {
	t.Helper()
	var out []*bundle
	for _, n := range shards {
		b := setup(t)
		if n != 0 {
			if err := migrations.SetShard(context.Background(), b.pool, n); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, b)
	}
	return out
}

// runShards runs the command with a --database-url for each bundle, and
// no DATABASE_URL.
func runShards(t *testing.T, bs []*bundle, args ...string) result {
	t.Helper()
	var all []string
	for _, b := range bs {
		all = append(all, "--database-url", b.url)
	}
	return (*bundle)(nil).runEnv(t, cli.Env{}, append(all, args...)...)
}

func TestShardedShowAndList(t *testing.T) {
	t.Parallel()
	bs := shardBundles(t, 1, 2)
	one := bs[0].insert(t, "mail", "send", queue.StatusFailed, 3, 3, "smtp: 451 try later")
	two := bs[1].insert(t, "reports", "build", queue.StatusFailed, 1, 1, "out of memory")
	if queue.ShardOf(one) != 1 || queue.ShardOf(two) != 2 {
		t.Fatalf("IDs %d and %d are of shards %d and %d, want 1 and 2", one, two, queue.ShardOf(one), queue.ShardOf(two))
	}

	// show goes to the shard of the ID, in either order of the URLs.
	for _, order := range [][]*bundle{bs, {bs[1], bs[0]}} {
		for id, want := range map[int64]string{one: "smtp: 451 try later", two: "out of memory"} {
			out := runShards(t, order, "show", fmt.Sprint(id)).ok(t).stdout
			if !strings.Contains(out, fmt.Sprintf("Task %d\n", id)) || !strings.Contains(out, want) {
				t.Fatalf("show %d:\n%s", id, out)
			}
		}
	}

	// An ID of a shard that is not configured: one clear error.
	stray := int64(3)<<48 | 7
	r := runShards(t, bs, "show", fmt.Sprint(stray))
	line := r.oneLine(t)
	if r.code != cli.ExitUsage || !strings.Contains(line, "shard 3") || !strings.Contains(line, "shards 1 and 2") {
		t.Fatalf("show of shard 3: exit %d, %s", r.code, line)
	}
	r = runShards(t, bs, "requeue", fmt.Sprint(one), fmt.Sprint(stray))
	if line := r.oneLine(t); r.code != cli.ExitUsage || !strings.Contains(line, "shard 3") {
		t.Fatalf("requeue naming shard 3: exit %d, %s", r.code, line)
	}
	if st := bs[0].status(t, one); st != queue.StatusFailed {
		t.Fatalf("a refused requeue changed task %d to %s", one, st)
	}

	// list: every shard, newest (highest ID) first, each row its shard.
	out := runShards(t, bs, "list").ok(t).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "SHARD") ||
		!regexp.MustCompile(fmt.Sprintf(`^2\s+%d\s+reports`, two)).MatchString(lines[1]) ||
		!regexp.MustCompile(fmt.Sprintf(`^1\s+%d\s+mail`, one)).MatchString(lines[2]) {
		t.Fatalf("list:\n%s", out)
	}
	var tasks []struct {
		Shard int   `json:"shard"`
		ID    int64 `json:"id"`
	}
	runShards(t, bs, "list", "--json", "--limit", "1").ok(t).decode(t, &tasks)
	if len(tasks) != 1 || tasks[0].ID != two || tasks[0].Shard != 2 {
		t.Fatalf("list --limit 1 = %+v", tasks)
	}

	// One database: no SHARD column, no shard field.
	single := bs[0].run(t, "list").ok(t).stdout
	if !strings.HasPrefix(single, "ID ") || strings.Contains(single, "SHARD") {
		t.Fatalf("list of one database:\n%s", single)
	}
	if js := bs[0].run(t, "list", "--json").ok(t).stdout; strings.Contains(js, `"shard"`) {
		t.Fatalf("list --json of one database names a shard: %s", js)
	}
}

func TestShardedStats(t *testing.T) {
	t.Parallel()
	bs := shardBundles(t, 0, 1, 2)
	for i, b := range bs {
		for range i + 1 {
			b.insert(t, "mail", "send", queue.StatusFailed, 1, 1, "boom")
		}
	}
	bs[2].insert(t, "reports", "build", queue.StatusCompleted, 1, 1, "")

	out := runShards(t, bs, "stats").ok(t).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "SHARD") {
		t.Fatalf("stats:\n%s", out)
	}
	// SHARD QUEUE STATE WAITING SCHEDULED PENDING OLDEST RETRYING RUNNING COMPLETED FAILED
	for i, want := range []string{`^0\s+mail\s+active(\s+\S+){7}\s+1\s`, `^1\s+mail\s`, `^2\s+mail(\s+\S+){8}\s+3\s`, `^2\s+reports\s`,
		`^\(all\)\s+\(all\)\s+0\s+0\s+0\s+-\s+0\s+0\s+1\s+6\s+0\s`} {
		if !regexp.MustCompile(want).MatchString(lines[i+1]) {
			t.Fatalf("stats line %d is not %s:\n%s", i+1, want, out)
		}
	}
	var js struct {
		Shards []struct {
			Shard int `json:"shard"`
			Total struct {
				Failed int64 `json:"failed"`
			} `json:"total"`
		} `json:"shards"`
		Total struct {
			Failed    int64 `json:"failed"`
			Completed int64 `json:"completed"`
		} `json:"total"`
	}
	runShards(t, bs, "stats", "--json").ok(t).decode(t, &js)
	if len(js.Shards) != 3 || js.Shards[2].Shard != 2 || js.Shards[2].Total.Failed != 3 || js.Total.Failed != 6 || js.Total.Completed != 1 {
		t.Fatalf("stats --json = %+v", js)
	}
}

func TestShardedRequeueCancel(t *testing.T) {
	t.Parallel()
	bs := shardBundles(t, 1, 2)
	a1 := bs[0].insert(t, "mail", "send", queue.StatusFailed, 1, 1, "boom")
	a2 := bs[0].insert(t, "mail", "send", queue.StatusFailed, 1, 1, "boom")
	b1 := bs[1].insert(t, "mail", "send", queue.StatusFailed, 1, 1, "boom")

	// By ID, over two shards; a dry run first changes nothing.
	before := bs[0].snapshot(t) + "|" + bs[1].snapshot(t)
	runShards(t, bs, "requeue", "--dry-run", fmt.Sprint(a1), fmt.Sprint(b1)).ok(t)
	if after := bs[0].snapshot(t) + "|" + bs[1].snapshot(t); after != before {
		t.Fatalf("dry run changed %s into %s", before, after)
	}
	out := runShards(t, bs, "requeue", fmt.Sprint(a1), fmt.Sprint(b1)).ok(t).stdout
	if bs[0].status(t, a1) != queue.StatusPending || bs[1].status(t, b1) != queue.StatusPending || bs[0].status(t, a2) != queue.StatusFailed {
		t.Fatalf("requeue by IDs over two shards:\n%s", out)
	}

	// By filter: every shard, per shard and in total.
	bs[1].insert(t, "mail", "send", queue.StatusFailed, 1, 1, "boom")
	bs[1].insert(t, "mail", "send", queue.StatusFailed, 1, 1, "boom")
	out = runShards(t, bs, "requeue", "--failed", "--dry-run").ok(t).stdout
	if !strings.Contains(out, "Dry run: 3 failed tasks would be requeued (shard 1: 1, shard 2: 2)") {
		t.Fatalf("requeue --failed --dry-run:\n%s", out)
	}
	out = runShards(t, bs, "requeue", "--failed", "--yes").ok(t).stdout
	for _, want := range []string{"Shard 1: requeued 1 task.", "Shard 2: requeued 2 tasks.", "Requeued 3 tasks in total."} {
		if !strings.Contains(out, want) {
			t.Fatalf("requeue --failed lacks %q:\n%s", want, out)
		}
	}
	if n := bs[0].count(t, "status = 'failed'") + bs[1].count(t, "status = 'failed'"); n != 0 {
		t.Fatalf("%d tasks still failed", n)
	}
	var res struct {
		Count  int64 `json:"count"`
		Shards []struct {
			Shard int   `json:"shard"`
			Count int64 `json:"count"`
		} `json:"shards"`
	}
	runShards(t, bs, "cancel", "--status", "pending", "--yes", "--json").ok(t).decode(t, &res)
	if res.Count != 5 || len(res.Shards) != 2 || res.Shards[0].Count != 2 || res.Shards[1].Count != 3 {
		t.Fatalf("cancel --json = %+v", res)
	}
	if n := bs[0].count(t, "status = 'cancelled'") + bs[1].count(t, "status = 'cancelled'"); n != 5 {
		t.Fatalf("%d tasks cancelled, want 5", n)
	}
}

func TestShardedSetup(t *testing.T) {
	t.Parallel()
	// Two unstamped databases are both shard 0: refused, naming both.
	bs := shardBundles(t, 0, 0)
	u, err := url.Parse(bs[1].url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "s3cretpw") // the test server trusts
	bs[1].url = u.String()
	r := runShards(t, bs, "list")
	line := r.oneLine(t)
	if r.code != cli.ExitUsage || !strings.Contains(line, "both shard 0") ||
		!strings.Contains(line, bs[0].schema) || !strings.Contains(line, bs[1].schema) || strings.Contains(line, "s3cretpw") {
		t.Fatalf("two shards 0: exit %d, %s", r.code, line)
	}
	// A database without skiplock's tables: the schema is what is wrong.
	bare := setupSchema(t, pgtest.Schema(t, false))
	r = runShards(t, []*bundle{shardBundles(t, 1)[0], bare}, "stats")
	if line := r.oneLine(t); r.code != cli.ExitError || !strings.Contains(line, "migrate up") || !strings.Contains(line, bare.schema) {
		t.Fatalf("stats with an unmigrated shard: exit %d, %s", r.code, line)
	}
	// A command that works on one database refuses several.
	r = runShards(t, bs, "locks")
	if line := r.oneLine(t); r.code != cli.ExitUsage || !strings.Contains(line, "pass one") {
		t.Fatalf("locks on two databases: exit %d, %s", r.code, line)
	}
}

func TestShardedMigrate(t *testing.T) {
	t.Parallel()
	stamped := shardBundles(t, 2)[0]
	bare := setupSchema(t, pgtest.Schema(t, false))
	bs := []*bundle{bare, stamped}

	out := runShards(t, bs, "migrate", "status").ok(t).stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	latest := fmt.Sprint(migrations.Latest)
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "SHARD") ||
		!regexp.MustCompile(`^-\s+\S+\s+0\s+not migrated`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^2\s+`+stamped.schema+`\s+`+latest+`\s+up to date`).MatchString(lines[2]) ||
		!strings.HasPrefix(lines[3], "Not at version "+latest) || !strings.Contains(lines[3], bare.schema) {
		t.Fatalf("migrate status:\n%s", out)
	}
	var st struct {
		Shards []struct {
			Shard   *int `json:"shard"`
			Version uint `json:"version"`
		} `json:"shards"`
		UpToDate bool `json:"up_to_date"`
	}
	runShards(t, bs, "migrate", "status", "--json").ok(t).decode(t, &st)
	if len(st.Shards) != 2 || st.Shards[0].Shard != nil || st.Shards[1].Shard == nil || *st.Shards[1].Shard != 2 || st.UpToDate {
		t.Fatalf("migrate status --json = %+v", st)
	}

	out = runShards(t, bs, "migrate", "up").ok(t).stdout
	if !regexp.MustCompile(`(?m)^0\s+`+bare.schema+`\s+0\s+`+latest+`\s+up to date`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^2\s+`+stamped.schema+`\s+`+latest+`\s+`+latest+`\s+up to date`).MatchString(out) ||
		!strings.Contains(out, "Every shard is at version "+latest+": up to date.") {
		t.Fatalf("migrate up:\n%s", out)
	}
}

func TestShardedByID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bs := shardBundles(t, 1, 2)
	wf, err := bs[1].client.EnqueueWorkflow(ctx, queue.Workflow{Name: "thumbnails", Steps: []queue.Step{{Name: "fetch"}}})
	if err != nil {
		t.Fatal(err)
	}
	out := runShards(t, bs, "workflow", "show", fmt.Sprint(wf.ID)).ok(t).stdout
	if !strings.Contains(out, fmt.Sprintf("Workflow %d thumbnails", wf.ID)) {
		t.Fatalf("workflow show on shard 2:\n%s", out)
	}
	r := runShards(t, bs, "workflow", "show", fmt.Sprint(int64(5)<<48|1))
	if line := r.oneLine(t); r.code != cli.ExitUsage || !strings.Contains(line, "workflow 1407374883553281 is of shard 5") {
		t.Fatalf("workflow show of shard 5: exit %d, %s", r.code, line)
	}

	// delete over two shards, a dry run first.
	a := bs[0].insert(t, "mail", "send", queue.StatusFailed, 1, 1, "boom")
	b := bs[1].insert(t, "mail", "send", queue.StatusCompleted, 1, 1, "")
	runShards(t, bs, "delete", "--dry-run", fmt.Sprint(a), fmt.Sprint(b)).ok(t)
	if bs[0].count(t, "id = $1", a) != 1 || bs[1].count(t, "id = $1", b) != 1 {
		t.Fatal("delete --dry-run deleted")
	}
	out = runShards(t, bs, "delete", "--yes", fmt.Sprint(a), fmt.Sprint(b)).ok(t).stdout
	if bs[0].count(t, "id = $1", a) != 0 || bs[1].count(t, "id = $1", b) != 0 || !strings.Contains(out, "Deleted 2 tasks.") {
		t.Fatalf("delete over two shards:\n%s", out)
	}
}
