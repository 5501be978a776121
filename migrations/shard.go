package migrations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/shard"
)

// ErrShardStamp is wrapped by SetShard's refusals: a shard number out of
// range, a database stamped with another shard, or one that holds IDs
// outside the shard's range. Nothing was changed.
var ErrShardStamp = shard.ErrStamp

// SetShard stamps the database of pool (its migrated skiplock schema) as
// shard n of a sharded queue (queue.NewSharded, worker.NewSharded), n from
// 1 to queue.MaxShard: the identity sequences of skiplock_tasks,
// skiplock_workflows and skiplock_batches are bounded to
// [n<<48 + 1, (n+1)<<48 - 1] and moved to the start of that range, so
// every new ID carries n in its high bits (queue.ShardOf) and the database
// refuses to hand out an ID of another shard. The bounds are the stamp:
// they need no table of their own and go with the sequences through a
// dump or a replica.
//
// It is idempotent: stamped with n already, it changes nothing. It never
// moves a sequence backward, and it refuses (wrapping ErrShardStamp) a
// database stamped with another shard, and one whose tables hold IDs
// below n's range, which would not route to it: an existing database
// joins a sharded queue as shard 0, unstamped. Run it after Up and before
// the first task, as the schema's owner; it takes a moment's lock on the
// three sequences.
func SetShard(ctx context.Context, pool *pgxpool.Pool, n int) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return shard.Set(ctx, tx, n) })
	if err != nil && !errors.Is(err, ErrShardStamp) {
		return fmt.Errorf("skiplock: SetShard: %w", pgerr.Interpret(err))
	}
	return err
}

// Shard returns the shard number the database of pool is stamped with
// (SetShard), or 0 when it is not stamped.
func Shard(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	n, err := shard.Stamp(ctx, pool)
	if err != nil {
		return 0, fmt.Errorf("skiplock: reading the shard stamp: %w", err)
	}
	return n, nil
}
