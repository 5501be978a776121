package queue

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/schema"
	"github.com/skiplock/skiplock/internal/shard"
)

// One queue over several databases: ShardedClient routes each task to one
// shard, each shard an ordinary skiplock database stamped with its number
// (migrations.SetShard), so that a task's ID says where it lives.

var (
	// ErrUnknownShard is wrapped by the error of a call given an ID (or a
	// shard number) of a shard the ShardedClient does not have.
	ErrUnknownShard = errors.New("skiplock: unknown shard")
	// ErrShardMismatch is wrapped by the error of a ShardedClient whose
	// pool for shard n reaches a database stamped with another shard, or
	// not stamped (migrations.SetShard). Nothing was inserted.
	ErrShardMismatch = errors.New("skiplock: database is not the shard it is configured as")
)

// MaxShard is the highest shard number: a task ID keeps its shard in the
// bits above the 48 low ones (ShardOf).
const MaxShard = shard.Max

// ShardOf returns the shard of a task, workflow or batch ID: the number
// its database was stamped with (migrations.SetShard), which the ID
// carries in its high bits (shard<<48 | n); 0 for an ID of a database
// that is not stamped.
func ShardOf(id int64) int { return shard.Of(id) }

// WithShardKey routes the task by key on a ShardedClient: every task with
// the same key goes to the same shard, whatever its other keys. Without
// it, a task routes by its sequence, unique, replace, exclusive or limit
// key, the first set in that order. A Client with one database ignores
// it. At most 1024 bytes (MaxKeyLength).
func WithShardKey(key string) Option { return func(o *options) { o.shardKey = key } }

// ShardedClient enqueues tasks over several databases, each an ordinary
// primary with skiplock's schema, and reads and changes them by ID. It is
// safe for concurrent use.
//
// A task with a routing key (WithShardKey, or its sequence, unique,
// replace, exclusive or limit key, the first set in that order) goes to
// the shard that the key hashes to (a jump consistent hash of the key's
// FNV-1a over the shard numbers in ascending order), so tasks keyed alike
// meet on one shard and what a key guarantees holds there: a sequence
// runs in order, a unique key is unique, an exclusive key runs one at a
// time. A key guarantees nothing across shards: two tasks with the same
// exclusive key but different unique keys may go to two shards (give
// them one WithShardKey). Adding a shard moves about one key in n+1 to
// it when its number is the highest, more otherwise.
//
// A task without a key goes to the shards in turn; a shard that cannot be
// reached (its connection failed before anything was sent) is passed
// over for the next. A task with WithDependsOn goes to the shard of its
// dependencies, which must all be on one shard.
type ShardedClient struct {
	shards  []int // ascending
	clients map[int]*Client
	pools   map[int]*pgxpool.Pool
	checked map[int]*atomic.Bool // the shard's stamp was read and matches
	next    atomic.Uint64        // the turn of tasks without a key
}

// NewSharded returns a ShardedClient on the databases of shards, each
// named by its shard number: 1 to MaxShard, the number the database was
// stamped with (migrations.SetShard), or 0 for a database that is not
// stamped (one that served alone before the others were added). opts
// apply to the Client of every shard. Each database's stamp is checked
// once, at its first use.
func NewSharded(shards map[int]*pgxpool.Pool, opts ...ClientOption) (*ShardedClient, error) {
	if len(shards) == 0 {
		return nil, errors.New("making a sharded client: it needs at least one shard")
	}
	s := &ShardedClient{clients: map[int]*Client{}, pools: map[int]*pgxpool.Pool{}, checked: map[int]*atomic.Bool{}}
	for n, pool := range shards {
		if err := shard.Check(n); err != nil {
			return nil, fmt.Errorf("making a sharded client: %w", err)
		}
		if pool == nil {
			return nil, fmt.Errorf("making a sharded client: shard %d has no pool", n)
		}
		s.shards = append(s.shards, n)
		s.clients[n] = New(pool, opts...)
		s.pools[n] = pool
		s.checked[n] = new(atomic.Bool)
	}
	slices.Sort(s.shards)
	return s, nil
}

// Shards returns the shard numbers, ascending.
func (s *ShardedClient) Shards() []int { return slices.Clone(s.shards) }

// Shard returns the Client of shard n, for what ShardedClient does not
// route: lists, statistics, limits, schedules, pauses. Each is that
// shard's alone. It does not check the shard's stamp.
func (s *ShardedClient) Shard(n int) (*Client, error) {
	c, ok := s.clients[n]
	if !ok {
		return nil, s.unknown(n, "")
	}
	return c, nil
}

// ShardFor returns the shard that tasks with routing key key go to.
func (s *ShardedClient) ShardFor(key string) int {
	h := fnv.New64a()
	h.Write([]byte(key))
	return s.shards[jump(h.Sum64(), len(s.shards))]
}

// jump is the jump consistent hash of Lamping and Veach: a bucket in
// [0, buckets) that moves for about one key in buckets when a bucket is
// added at the end.
func jump(key uint64, buckets int) int {
	var b, j int64 = -1, 0
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

func (s *ShardedClient) unknown(n int, what string) error {
	if what != "" {
		what = " of " + what
	}
	return fmt.Errorf("%w %d%s: this client has shards %v", ErrUnknownShard, n, what, s.shards)
}

// client returns the Client of shard n once its database's stamp is known
// to be n.
func (s *ShardedClient) client(ctx context.Context, n int, what string) (*Client, error) {
	c, ok := s.clients[n]
	if !ok {
		return nil, s.unknown(n, what)
	}
	if s.checked[n].Load() {
		return c, nil
	}
	got, err := shard.Stamp(ctx, s.pools[n])
	if err != nil {
		return nil, fmt.Errorf("shard %d: reading its stamp: %w", n, err)
	}
	if got != n {
		if got == 0 {
			return nil, fmt.Errorf("%w: shard %d's database is not stamped: run migrations.SetShard on it with %d", ErrShardMismatch, n, n)
		}
		return nil, fmt.Errorf("%w: shard %d's database is stamped as shard %d", ErrShardMismatch, n, got)
	}
	s.checked[n].Store(true)
	return c, nil
}

// byID returns the Client of the shard that id belongs to.
func (s *ShardedClient) byID(ctx context.Context, id int64, what string) (*Client, error) {
	return s.client(ctx, ShardOf(id), fmt.Sprintf("%s %d", what, id))
}

// routeKey returns the routing key of o: the first set of its shard,
// sequence, unique, replace, exclusive and limit keys. name and payload
// derive WithUnique's key.
func routeKey(o options, name string, payload any) string {
	switch {
	case o.shardKey != "":
		return o.shardKey
	case o.sequenceKey != "":
		return o.sequenceKey
	case o.uniqueKey != "":
		return o.uniqueKey
	case o.uniqueDerive:
		if p, err := schema.EncodePayload(payload); err == nil {
			return deriveKey(name, p)
		}
		return "" // the enqueue reports the payload
	case o.replaceKey != "":
		return o.replaceKey
	case o.exclusiveKey != "":
		return o.exclusiveKey
	}
	return o.limitKey
}

func applied(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// route returns the shard of a task with opts, and whether anything
// decides it; a task that nothing routes goes to the shards in turn.
func (s *ShardedClient) route(name string, payload any, opts []Option) (n int, routed bool, err error) {
	o := applied(opts)
	dep := -1
	for _, id := range o.dependsOn {
		d := ShardOf(id)
		if _, ok := s.clients[d]; !ok {
			return 0, false, fmt.Errorf("%w: WithDependsOn: %w", ErrInvalidTask, s.unknown(d, fmt.Sprintf("task %d", id)))
		}
		if dep >= 0 && d != dep {
			return 0, false, fmt.Errorf("%w: WithDependsOn names tasks of shards %d and %d: a task and its dependencies must be on one shard",
				ErrInvalidTask, dep, d)
		}
		dep = d
	}
	key := routeKey(o, name, payload)
	switch {
	case key != "" && dep >= 0 && s.ShardFor(key) != dep:
		return 0, false, fmt.Errorf("%w: the task depends on tasks of shard %d but its routing key %q goes to shard %d: "+
			"a task and its dependencies must be on one shard (give them one WithShardKey)", ErrInvalidTask, dep, key, s.ShardFor(key))
	case key != "":
		return s.ShardFor(key), true, nil
	case dep >= 0:
		return dep, true, nil
	}
	return 0, false, nil
}

// unreached reports whether err says that nothing reached the shard's
// server: the task can go to another shard without being inserted twice.
func unreached(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.SafeToRetry(err)
}

// on runs fn on the Client of shard n, or, when n is -1, on the shards in
// turn, passing over the ones that cannot be reached. A shard passed over
// takes a turn of its own from the next shard: each shard that can be
// reached gets its even share while one is down, not the one after it
// the share of the one down as well.
func (s *ShardedClient) on(ctx context.Context, n int, what string, fn func(c *Client) error) error {
	if n >= 0 {
		c, err := s.client(ctx, n, what)
		if err != nil {
			return err
		}
		return fn(c)
	}
	tried := make([]bool, len(s.shards))
	var errs []error
	for range len(s.shards) {
		i := int((s.next.Add(1) - 1) % uint64(len(s.shards)))
		for tried[i] {
			i = (i + 1) % len(s.shards)
		}
		tried[i] = true
		n := s.shards[i]
		c, err := s.client(ctx, n, what)
		if err == nil {
			if err = fn(c); err == nil {
				return nil
			}
			if !unreached(err) || ctx.Err() != nil {
				return err
			}
		} else if errors.Is(err, ErrShardMismatch) || ctx.Err() != nil {
			return err // a stamp that could not be read changed nothing: next
		}
		errs = append(errs, fmt.Errorf("shard %d: %w", n, err))
	}
	return fmt.Errorf("enqueueing: no shard could be reached: %w", errors.Join(errs...))
}

// Enqueue inserts a task on its shard (see ShardedClient) and returns its
// ID, which carries the shard (ShardOf). It is Client.Enqueue otherwise.
func (s *ShardedClient) Enqueue(ctx context.Context, name string, payload any, opts ...Option) (int64, error) {
	n, routed, err := s.route(name, payload, opts)
	if err != nil {
		return 0, err
	}
	if !routed {
		n = -1
	}
	var id int64
	err = s.on(ctx, n, "", func(c *Client) error {
		var err error
		id, err = c.Enqueue(ctx, name, payload, opts...)
		return err
	})
	return id, err
}

// EnqueueArgs is Enqueue of a typed task: NewTaskFrom(args, opts...). The
// type's TaskOptions route it as the task's own options do.
func (s *ShardedClient) EnqueueArgs(ctx context.Context, args TaskArgs, opts ...Option) (int64, error) {
	t, err := taskFrom(args, opts)
	if err != nil {
		return 0, err
	}
	return s.Enqueue(ctx, t.Name, t.Payload, t.Options...)
}

// EnqueueTx inserts a task within tx, a transaction on shard n's
// database: the task exists if and only if tx commits. A task whose
// routing key or dependencies belong to another shard is refused with an
// error wrapping ErrInvalidTask that names both shards.
func (s *ShardedClient) EnqueueTx(ctx context.Context, n int, tx Executor, name string, payload any, opts ...Option) (int64, error) {
	to, routed, err := s.route(name, payload, opts)
	if err != nil {
		return 0, err
	}
	if routed && to != n {
		return 0, fmt.Errorf("%w: the task belongs to shard %d (its routing key or dependencies), not to shard %d of the transaction",
			ErrInvalidTask, to, n)
	}
	c, err := s.client(ctx, n, "the transaction")
	if err != nil {
		return 0, err
	}
	return c.EnqueueTx(ctx, tx, name, payload, opts...)
}

// groupRoute returns the shard of a workflow or batch: the routing key of
// its Options (its shard, exclusive or limit key), or -1 for the shards in
// turn. A member's own WithShardKey must agree with it.
func (s *ShardedClient) groupRoute(what string, opts []Option, members [][]Option) (int, error) {
	key := routeKey(applied(opts), "", nil)
	for _, m := range members {
		if k := applied(m).shardKey; k != "" && k != key {
			return 0, fmt.Errorf("%w: a task of %s has WithShardKey(%q), unlike the %s's routing key %q: "+
				"%s lives on one shard (set WithShardKey in its Options)", ErrInvalidTask, what, k, what, key, what)
		}
	}
	if key == "" {
		return -1, nil
	}
	return s.ShardFor(key), nil
}

// EnqueueWorkflow inserts a workflow on one shard: the one its Options'
// routing key goes to (WithShardKey, or an exclusive or limit key), or
// the next in turn. Every step lives there, and the IDs of the workflow
// and its tasks carry that shard.
func (s *ShardedClient) EnqueueWorkflow(ctx context.Context, wf Workflow) (EnqueuedWorkflow, error) {
	members := make([][]Option, len(wf.Steps))
	for i, st := range wf.Steps {
		members[i] = st.Options
	}
	n, err := s.groupRoute("a workflow", wf.Options, members)
	if err != nil {
		return EnqueuedWorkflow{}, err
	}
	var out EnqueuedWorkflow
	err = s.on(ctx, n, "", func(c *Client) error {
		var err error
		out, err = c.EnqueueWorkflow(ctx, wf)
		return err
	})
	return out, err
}

// EnqueueBatch inserts a batch on one shard, chosen as EnqueueWorkflow
// chooses: its members and callbacks live there.
func (s *ShardedClient) EnqueueBatch(ctx context.Context, b Batch) (EnqueuedBatch, error) {
	members := make([][]Option, 0, len(b.Tasks)+2)
	for _, t := range append(slices.Clone(b.Tasks), b.OnFinish, b.OnSuccess) {
		members = append(members, t.Options)
	}
	n, err := s.groupRoute("a batch", b.Options, members)
	if err != nil {
		return EnqueuedBatch{}, err
	}
	var out EnqueuedBatch
	err = s.on(ctx, n, "", func(c *Client) error {
		var err error
		out, err = c.EnqueueBatch(ctx, b)
		return err
	})
	return out, err
}

// Get returns the task with the given ID from its shard, or ErrNotFound;
// an ID of a shard this client does not have is an error wrapping
// ErrUnknownShard.
func (s *ShardedClient) Get(ctx context.Context, id int64) (*Task, error) {
	c, err := s.byID(ctx, id, "task")
	if err != nil {
		return nil, err
	}
	return c.Get(ctx, id)
}

// GetWorkflow returns a workflow from its shard, as Client.GetWorkflow.
func (s *ShardedClient) GetWorkflow(ctx context.Context, id int64) (*WorkflowInfo, error) {
	c, err := s.byID(ctx, id, "workflow")
	if err != nil {
		return nil, err
	}
	return c.GetWorkflow(ctx, id)
}

// GetBatch returns a batch from its shard, as Client.GetBatch.
func (s *ShardedClient) GetBatch(ctx context.Context, id int64) (*BatchInfo, error) {
	c, err := s.byID(ctx, id, "batch")
	if err != nil {
		return nil, err
	}
	return c.GetBatch(ctx, id)
}

// byShard splits ids by shard, in shard order; an ID of an unknown shard
// is an error, before anything is changed.
func (s *ShardedClient) byShard(ids []int64) (map[int][]int64, []int, error) {
	if len(ids) == 0 {
		return nil, s.shards, nil
	}
	out := map[int][]int64{}
	for _, id := range ids {
		n := ShardOf(id)
		if _, ok := s.clients[n]; !ok {
			return nil, nil, fmt.Errorf("%w: %w", ErrInvalidRequest, s.unknown(n, fmt.Sprintf("task %d", id)))
		}
		out[n] = append(out[n], id)
	}
	var order []int
	for _, n := range s.shards {
		if len(out[n]) > 0 {
			order = append(order, n)
		}
	}
	return out, order, nil
}

// Requeue is Client.Requeue on every shard concerned: the shards of the
// named IDs, or every shard for a Filter, one after another in shard
// order. A shard that fails does not stop the others: the result adds up
// what each shard changed, and the error joins each shard's, named. The
// other bulk changes (Cancel, RunNow, Delete, Purge) work the same way.
func (s *ShardedClient) Requeue(ctx context.Context, req RequeueRequest) (ChangeResult, error) {
	if err := req.Validate(); err != nil {
		return ChangeResult{}, err
	}
	return eachShard(ctx, s, req.IDs, func(c *Client, ids []int64, done int64) (ChangeResult, error) {
		sub := req
		sub.IDs = ids
		if req.Progress != nil {
			sub.Progress = func(k int64) { req.Progress(done + k) }
		}
		return c.Requeue(ctx, sub)
	})
}

// Cancel is Client.Cancel on every shard concerned, as Requeue is.
func (s *ShardedClient) Cancel(ctx context.Context, req CancelRequest) (ChangeResult, error) {
	if err := req.Validate(); err != nil {
		return ChangeResult{}, err
	}
	return eachShard(ctx, s, req.IDs, func(c *Client, ids []int64, done int64) (ChangeResult, error) {
		sub := req
		sub.IDs = ids
		if req.Progress != nil {
			sub.Progress = func(k int64) { req.Progress(done + k) }
		}
		return c.Cancel(ctx, sub)
	})
}

// RunNow is Client.RunNow on the shard of each named task, as Requeue is.
func (s *ShardedClient) RunNow(ctx context.Context, ids []int64) (ChangeResult, error) {
	if _, err := namedIDs(ids); err != nil {
		return ChangeResult{IDs: []int64{}}, err
	}
	return eachShard(ctx, s, ids, func(c *Client, ids []int64, _ int64) (ChangeResult, error) {
		return c.RunNow(ctx, ids)
	})
}

// Delete is Client.Delete on the shard of each named task, as Requeue is.
func (s *ShardedClient) Delete(ctx context.Context, ids []int64) (ChangeResult, error) {
	if _, err := namedIDs(ids); err != nil {
		return ChangeResult{IDs: []int64{}}, err
	}
	return eachShard(ctx, s, ids, func(c *Client, ids []int64, _ int64) (ChangeResult, error) {
		return c.Delete(ctx, ids)
	})
}

// Purge is Client.Purge on every shard, as Requeue is.
func (s *ShardedClient) Purge(ctx context.Context, req PurgeRequest) (ChangeResult, error) {
	if err := req.Validate(); err != nil {
		return ChangeResult{}, err
	}
	return eachShard(ctx, s, nil, func(c *Client, _ []int64, done int64) (ChangeResult, error) {
		sub := req
		if req.Progress != nil {
			sub.Progress = func(k int64) { req.Progress(done + k) }
		}
		return c.Purge(ctx, sub)
	})
}

// eachShard runs one change on each shard concerned, in shard order: the
// shards of ids, with each shard's own ids, or every shard (ids nil) for a
// filter. run is told how many tasks the shards before it changed, and its
// result is added to the others; a shard that fails does not stop the
// others, and the error joins each shard's, named.
func eachShard(ctx context.Context, s *ShardedClient, ids []int64, run func(c *Client, ids []int64, done int64) (ChangeResult, error)) (ChangeResult, error) {
	var res ChangeResult
	if len(ids) > 0 {
		res.IDs, res.Skipped = []int64{}, []SkippedTask{}
	}
	byShard, order, err := s.byShard(ids)
	if err != nil {
		return res, err
	}
	var errs []error
	for _, n := range order {
		c, err := s.client(ctx, n, "")
		if err == nil {
			var sub []int64
			if byShard != nil {
				sub = byShard[n]
			}
			var r ChangeResult
			r, err = run(c, sub, res.Changed)
			res.Changed += r.Changed
			res.IDs = append(res.IDs, r.IDs...)
			res.Skipped = append(res.Skipped, r.Skipped...)
			if r.Requested != nil {
				res.Requested = append(nonNil(res.Requested), r.Requested...)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d: %w", n, err))
		}
	}
	return res, errors.Join(errs...)
}
