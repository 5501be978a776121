package lock

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// TryInTx takes the named lock in mode inside tx, held until tx commits or
// rolls back, if no other holder has it; otherwise it returns an error
// wrapping ErrNotAcquired, and tx goes on. Transaction locks and session
// locks of the same name exclude each other. It needs no Client: the lock
// is tx's connection's.
func TryInTx(ctx context.Context, tx pgx.Tx, name string, mode Mode) error {
	if err := check(name, mode); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("%w: lock.TryInTx needs a transaction", ErrInvalid)
	}
	return tryInTx(ctx, tx, name, mode)
}

// InTx is TryInTx waiting while others hold the lock, until ctx ends:
// bound the wait with context.WithTimeout. At ctx's deadline the error
// wraps both ErrNotAcquired and context.DeadlineExceeded; cancelled, it
// wraps ctx's cause. It tries again and again rather than block in the
// server, pausing up to 250ms (Options.PollInterval's default) between tries.
func InTx(ctx context.Context, tx pgx.Tx, name string, mode Mode) error {
	if err := check(name, mode); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("%w: lock.InTx needs a transaction", ErrInvalid)
	}
	poller := &Client{opts: Options{PollInterval: defaultPollInterval}}
	return poller.poll(ctx, fmt.Sprintf("lock %q", name), func() error {
		return tryInTx(ctx, tx, name, mode)
	})
}

func tryInTx(ctx context.Context, tx pgx.Tx, name string, mode Mode) error {
	got, err := db.New().LockTxTry(ctx, tx, db.LockTxTryParams{Shared: mode == Shared, Key: Key(name), Name: name})
	if err != nil {
		return fmt.Errorf("lock %q: %w", name, pgerr.Interpret(err))
	}
	if !got {
		return fmt.Errorf("%w: lock %q (%s) is held by another session", ErrNotAcquired, name, mode)
	}
	return nil
}
