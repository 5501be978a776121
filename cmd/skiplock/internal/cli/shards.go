package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// A sharded queue (queue.NewSharded) is several databases, each stamped
// with its shard number (migrations.SetShard). Given one --database-url per
// shard, list, show, stats, requeue, cancel and migrate up/status work on
// all of them as on one: by ID, on the shard the ID carries
// (queue.ShardOf); otherwise on every shard, each row naming its shard.

// urlsFlag is --database-url: repeated, one URL per shard.
type urlsFlag struct{ urls *[]string }

func (f urlsFlag) Set(s string) error { *f.urls = append(*f.urls, s); return nil }
func (f urlsFlag) String() string     { return strings.Join(*f.urls, " ") }
func (f urlsFlag) Type() string       { return "string" }

// sharded reports whether several databases are configured.
func (a *app) sharded() bool { return len(a.databaseURLs) > 1 }

// shardConn is one configured database.
type shardConn struct {
	n      int // its stamp: 0 when not stamped
	url    string
	pool   *pgxpool.Pool
	client *queue.Client
}

// shardSet is the configured databases, by ascending shard number.
type shardSet []shardConn

func (s shardSet) numbers() []int {
	out := make([]int, len(s))
	for i, c := range s {
		out[i] = c.n
	}
	return out
}

func (s shardSet) close() {
	for _, c := range s {
		c.pool.Close()
	}
}

// of returns the shard of n, or an error naming the configured ones.
func (s shardSet) of(n int, what string) (shardConn, error) {
	for _, c := range s {
		if c.n == n {
			return c, nil
		}
	}
	return shardConn{}, fmt.Errorf("%s is of shard %d, which is not configured: the --database-url given are shards %s",
		what, n, joinInts(s.numbers()))
}

// byShard splits ids by their shard (queue.ShardOf), in shard order; an
// ID of a shard not configured is an error, before anything is done.
func (s shardSet) byShard(ids []int64) ([]shardConn, map[int][]int64, error) {
	groups := map[int][]int64{}
	for _, id := range ids {
		n := queue.ShardOf(id)
		if _, err := s.of(n, fmt.Sprintf("task %d", id)); err != nil {
			return nil, nil, usageErrorf("%v", err)
		}
		groups[n] = append(groups[n], id)
	}
	var order []shardConn
	for _, c := range s {
		if len(groups[c.n]) > 0 {
			order = append(order, c)
		}
	}
	return order, groups, nil
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprint(n)
	}
	if len(parts) > 1 {
		return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
	}
	return strings.Join(parts, "")
}

// connectShards connects to every configured database and reads its shard
// number (migrations.Shard), once its schema is checked (checkSchema): two
// databases stamped alike are an error naming both.
func (a *app) connectShards(ctx context.Context) (shardSet, error) {
	var set shardSet
	for _, url := range a.databaseURLs {
		pool, err := a.connectURL(ctx, url)
		if err != nil {
			set.close()
			return nil, &urlError{url: url, err: err}
		}
		client := queue.New(pool)
		// The stamp lives in skiplock's tables: check them first.
		if err := checkSchema(ctx, client); err != nil {
			pool.Close()
			set.close()
			return nil, &urlError{url: url, err: err}
		}
		n, err := migrations.Shard(ctx, pool)
		if err != nil {
			pool.Close()
			set.close()
			return nil, &urlError{url: url, err: err}
		}
		if i := slices.IndexFunc(set, func(c shardConn) bool { return c.n == n }); i >= 0 {
			pool.Close()
			set.close()
			return nil, usageErrorf("--database-url %s and --database-url %s are both shard %d: each database of a sharded queue has its own shard number (migrations.SetShard)",
				set[i].url, url, n)
		}
		set = append(set, shardConn{n: n, url: url, pool: pool, client: client})
	}
	slices.SortFunc(set, func(x, y shardConn) int { return x.n - y.n })
	return set, nil
}

// openShards is open for every configured database: connected, shard
// numbers read, schemas checked. With one database its shard number is not
// read (0).
func (a *app) openShards(ctx context.Context) (shardSet, func(), error) {
	if !a.sharded() {
		client, done, err := a.open(ctx)
		if err != nil {
			return nil, nil, err
		}
		return shardSet{{pool: a.pool, client: client}}, done, nil
	}
	set, err := a.connectShards(ctx)
	if err != nil {
		return nil, nil, err
	}
	return set, set.close, nil
}

// openFor connects and returns the client of the shard of id, the ID of
// what (task, workflow, batch): the one database when a single one is
// configured.
func (a *app) openFor(ctx context.Context, what string, id int64) (*queue.Client, func(), error) {
	set, done, err := a.openShards(ctx)
	if err != nil {
		return nil, nil, err
	}
	if !a.sharded() {
		return set[0].client, done, nil
	}
	c, err := set.of(queue.ShardOf(id), fmt.Sprintf("%s %d", what, id))
	if err != nil {
		done()
		return nil, nil, usageErrorf("%v", err)
	}
	return c.client, done, nil
}

// shardError names the shard of an error when several are configured.
func shardError(a *app, c shardConn, err error) error {
	if !a.sharded() {
		return err
	}
	return fmt.Errorf("shard %d: %w", c.n, err)
}

// shardStatsJSON is one shard of `stats --json` with several shards.
type shardStatsJSON struct {
	Shard     int             `json:"shard"`
	Queues    []statsJSON     `json:"queues"`
	Total     statsJSON       `json:"total"`
	Unhandled []unhandledJSON `json:"unhandled"`
}

// shardedStats is stats over several shards: each queue's row names its
// shard, and a last row adds up every shard.
func (a *app) shardedStats(ctx context.Context) error {
	set, done, err := a.openShards(ctx)
	if err != nil {
		return err
	}
	defer done()
	var (
		out   []shardStatsJSON
		total queue.QueueStats
		stats = map[int]*queue.Stats{}
		unh   = map[int][]ops.UnhandledTasks{}
	)
	for _, c := range set {
		s, err := c.client.Stats(ctx)
		if err != nil {
			return fmt.Errorf("shard %d: %w", c.n, err)
		}
		u, err := ops.Unhandled(ctx, c.client)
		if err != nil {
			return fmt.Errorf("shard %d: %w", c.n, err)
		}
		stats[c.n], unh[c.n] = s, u
		total.Add(s.Total)
		o := shardStatsJSON{Shard: c.n, Queues: make([]statsJSON, len(s.Queues)), Total: toStatsJSON(s.Total), Unhandled: make([]unhandledJSON, len(u))}
		for i, q := range s.Queues {
			o.Queues[i] = toStatsJSON(q)
		}
		for i, x := range u {
			o.Unhandled[i] = unhandledJSON{Queue: x.Queue, Name: x.Name, Tasks: x.Tasks, OldestCreatedAt: x.OldestCreatedAt, OldestRunAt: x.OldestRunAt}
		}
		out = append(out, o)
	}
	if a.json {
		return a.printJSON(struct {
			Shards []shardStatsJSON `json:"shards"`
			Total  statsJSON        `json:"total"`
		}{out, toStatsJSON(total)})
	}
	tw := table(a.env.Stdout, append([]string{"SHARD", "QUEUE", "STATE", "WAITING", "SCHEDULED", "PENDING", "OLDEST DUE", "RETRYING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"},
		recentHeads()...)...)
	for _, c := range set {
		for _, q := range stats[c.n].Queues {
			row(tw, append([]any{c.n}, statsCells(q, q.Queue)...)...)
		}
	}
	row(tw, append([]any{"(all)"}, statsCells(total, "(all)")...)...)
	if err := tw.Flush(); err != nil {
		return err
	}
	var waiting bool
	for _, c := range set {
		waiting = waiting || len(unh[c.n]) > 0
	}
	if !waiting {
		return nil
	}
	fmt.Fprintln(a.env.Stdout, "\nWaiting for a handler (no live worker of the shard handles these names):")
	tw = table(a.env.Stdout, "SHARD", "QUEUE", "NAME", "TASKS", "OLDEST")
	for _, c := range set {
		for _, u := range unh[c.n] {
			row(tw, c.n, u.Queue, u.Name, count(u.Tasks), ago(u.OldestCreatedAt))
		}
	}
	return tw.Flush()
}

// shardSchemaJSON is one shard of `migrate up|status --json` with several
// shards: Shard is null for a database whose tables are missing (its stamp
// lives in them).
type shardSchemaJSON struct {
	Shard *int `json:"shard"`
	schemaJSON
}

// schemaShard is one database as migrate sees it.
type schemaShard struct {
	url    string
	pool   *pgxpool.Pool
	n      int // -1: not known, the tables are missing
	before ops.SchemaInfo
	after  ops.SchemaInfo
}

// migrateShards is migrate status, or up, on every configured database:
// the version of each, and which are behind.
func (a *app) migrateShards(ctx context.Context, up bool) error {
	var dbs []*schemaShard
	defer func() {
		for _, d := range dbs {
			d.pool.Close()
		}
	}()
	readShard := func(d *schemaShard) error {
		d.n = -1
		if d.after.Version == 0 {
			return nil
		}
		n, err := migrations.Shard(ctx, d.pool)
		if err != nil {
			return &urlError{url: d.url, err: err}
		}
		for _, o := range dbs {
			if o != d && o.n == n {
				done := ""
				if up {
					done = fmt.Sprintf(" (migrated to version %d)", d.after.Version)
				}
				return usageErrorf("--database-url %s and --database-url %s are both shard %d%s: each database of a sharded queue has its own shard number (migrations.SetShard)",
					o.url, d.url, n, done)
			}
		}
		d.n = n
		return nil
	}
	for _, url := range a.databaseURLs {
		pool, err := a.connectURL(ctx, url)
		if err != nil {
			return &urlError{url: url, err: err}
		}
		d := &schemaShard{url: url, pool: pool}
		dbs = append(dbs, d)
		if d.before, err = schemaState(ctx, pool); err != nil {
			return &urlError{url: url, err: err}
		}
		d.after = d.before
		if err := readShard(d); err != nil {
			return err
		}
	}
	if up {
		for _, d := range dbs {
			if err := migrations.Up(ctx, d.pool); err != nil {
				return fmt.Errorf("%s: %w (the shards before it are migrated)", d.name(), err)
			}
			var err error
			if d.after, err = schemaState(ctx, d.pool); err != nil {
				return fmt.Errorf("%s: %w", d.name(), err)
			}
			if err := readShard(d); err != nil {
				return err
			}
		}
	}
	slices.SortStableFunc(dbs, func(x, y *schemaShard) int { return x.n - y.n })

	var behind []string
	for _, d := range dbs {
		if d.after.Version != migrations.Latest || d.after.Dirty {
			behind = append(behind, d.name())
		}
	}
	if a.json {
		out := make([]shardSchemaJSON, len(dbs))
		for i, d := range dbs {
			info := d.after
			o := shardSchemaJSON{schemaJSON: schemaJSON{
				Schema: info.Name, Version: info.Version, Latest: migrations.Latest,
				Dirty: info.Dirty, UpToDate: info.Version == migrations.Latest && !info.Dirty,
			}}
			if d.n >= 0 {
				n := d.n
				o.Shard = &n
			}
			if up {
				v := d.before.Version
				o.Previous = &v
			}
			out[i] = o
		}
		return a.printJSON(struct {
			Shards   []shardSchemaJSON `json:"shards"`
			Latest   uint              `json:"latest"`
			UpToDate bool              `json:"up_to_date"`
		}{out, migrations.Latest, len(behind) == 0})
	}
	heads := []string{"SHARD", "SCHEMA", "VERSION", "STATE"}
	if up {
		heads = []string{"SHARD", "SCHEMA", "FROM", "TO", "STATE"}
	}
	tw := table(a.env.Stdout, heads...)
	for _, d := range dbs {
		cells := []any{d.label(), orDash(d.after.Name)}
		if up {
			cells = append(cells, d.before.Version)
		}
		row(tw, append(cells, d.after.Version, versionState(d.after))...)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(behind) == 0 {
		fmt.Fprintf(a.env.Stdout, "Every shard is at version %d: up to date.\n", migrations.Latest)
	} else {
		fmt.Fprintf(a.env.Stdout, "Not at version %d, which this build needs: %s.\n", migrations.Latest, strings.Join(behind, ", "))
	}
	return nil
}

func (d *schemaShard) name() string {
	if d.n < 0 {
		return "--database-url " + d.url
	}
	return fmt.Sprintf("shard %d", d.n)
}

// label is the shard's number, or "-" when its tables are missing.
func (d *schemaShard) label() string {
	if d.n < 0 {
		return "-"
	}
	return fmt.Sprint(d.n)
}

// versionState says what a schema's version means for this build.
func versionState(info ops.SchemaInfo) string {
	switch {
	case info.Dirty:
		return "dirty: a migration failed part way; fix it by hand, then run skiplock migrate up"
	case info.Version == 0:
		return "not migrated: run skiplock migrate up"
	case info.Version < migrations.Latest:
		return fmt.Sprintf("behind: this build needs %d; run skiplock migrate up", migrations.Latest)
	case info.Version > migrations.Latest:
		return fmt.Sprintf("newer than this build knows (%d): upgrade skiplock", migrations.Latest)
	}
	return "up to date"
}

// shardCountJSON is one shard's count in requeue's and cancel's --json
// with several shards.
type shardCountJSON struct {
	Shard int   `json:"shard"`
	Count int64 `json:"count"`
}

// changeBulkShards is changeBulk on every shard: one count and one
// confirmation for all of them, then the change on each shard in turn,
// reported per shard and in total.
func (a *app) changeBulkShards(ctx context.Context, set shardSet, b bulk) error {
	counts := make([]int64, len(set))
	var n int64
	for i, c := range set {
		k, err := ops.Count(ctx, c.client, b.filter)
		if err != nil {
			return fmt.Errorf("shard %d: %w", c.n, err)
		}
		counts[i], n = k, n+k
	}
	perShard := func(counts []int64) []shardCountJSON {
		out := make([]shardCountJSON, len(set))
		for i, c := range set {
			out[i] = shardCountJSON{Shard: c.n, Count: counts[i]}
		}
		return out
	}
	split := func(counts []int64) string {
		parts := make([]string, len(set))
		for i, c := range set {
			parts[i] = fmt.Sprintf("shard %d: %s", c.n, count(counts[i]))
		}
		return strings.Join(parts, ", ")
	}
	if b.dryRun {
		var tasks []*queue.Task
		for _, c := range set {
			page, err := c.client.List(ctx, b.filter, queue.Page{Limit: b.limit})
			if err != nil {
				return fmt.Errorf("shard %d: %w", c.n, err)
			}
			tasks = append(tasks, page...)
		}
		slices.SortFunc(tasks, func(x, y *queue.Task) int { return cmp.Compare(y.ID, x.ID) })
		tasks = tasks[:min(len(tasks), b.limit)]
		if a.json {
			out := struct {
				changeJSON
				Shards []shardCountJSON `json:"shards"`
			}{changeJSON{Action: b.action, DryRun: true, Count: n, Tasks: make([]taskJSON, len(tasks))}, perShard(counts)}
			for i, t := range tasks {
				out.Tasks[i] = a.toJSON(t)
			}
			return a.printJSON(out)
		}
		fmt.Fprintf(a.env.Stdout, "Dry run: %s would be %s (%s); nothing was changed.\n", describe(b.filter, n), b.past, split(counts))
		if len(tasks) > 0 {
			a.printTasks(a.env.Stdout, tasks)
			if int64(len(tasks)) < n {
				fmt.Fprintf(a.env.Stdout, "(the newest %d of %s; see more with --limit)\n", len(tasks), count(n))
			}
		}
		return nil
	}

	done := make([]int64, len(set))
	var errs []error
	if n == 0 {
		if !a.json {
			fmt.Fprintf(a.env.Stdout, "No %s on any shard; nothing %s.\n", describe(b.filter, -1), b.past)
		}
	} else {
		if err := a.confirm(b.yes, fmt.Sprintf("%s %s (%s)?", capitalize(b.action), describe(b.filter, n), split(counts))); err != nil {
			return err
		}
		var total int64
		for i, c := range set {
			if counts[i] == 0 {
				continue
			}
			p := a.progress(fmt.Sprintf("shard %d: %s", c.n, b.past), counts[i])
			k, err := b.run(ctx, c.client, p.update)
			p.done()
			done[i], total = k, total+k
			if err != nil {
				errs = append(errs, fmt.Errorf("shard %d: %s after %s tasks were %s: %w", c.n, b.action, count(k), b.past, err))
			}
			if !a.json {
				fmt.Fprintf(a.env.Stdout, "Shard %d: %s %s.\n", c.n, b.past, plural(k, "task", "tasks"))
			}
		}
		n = total
		if !a.json {
			fmt.Fprintf(a.env.Stdout, "%s %s in total.\n", capitalize(b.past), plural(n, "task", "tasks"))
		}
	}
	if b.after != nil && len(errs) == 0 {
		clients := make([]*queue.Client, len(set))
		for i, c := range set {
			clients[i] = c.client
		}
		note, err := b.after(ctx, clients)
		if err != nil {
			return err
		}
		if note != "" && !a.json {
			fmt.Fprintln(a.env.Stdout, note)
		}
	}
	if a.json {
		if err := a.printJSON(struct {
			changeJSON
			Shards []shardCountJSON `json:"shards"`
		}{changeJSON{Action: b.action, Count: n}, perShard(done)}); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// urlError is an error of the database of one of several --database-url:
// the message names it.
type urlError struct {
	url string
	err error
}

func (e *urlError) Error() string { return "--database-url " + e.url + ": " + e.err.Error() }
func (e *urlError) Unwrap() error { return e.err }
