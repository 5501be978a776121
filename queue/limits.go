package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
)

// Errors of the concurrency limits.
var (
	// ErrInvalidLimit wraps every error that SetLimit and RemoveLimit
	// return for a limit that is not well formed.
	ErrInvalidLimit = errors.New("skiplock: invalid limit")
	// ErrLimitNotFound is wrapped by RemoveLimit's error when no limit of
	// that scope is set.
	ErrLimitNotFound = errors.New("skiplock: limit not found")
)

// Limit is a concurrency limit that holds across every worker on every
// machine: at most Max tasks of its scope run at once, counted in
// PostgreSQL at claim time. Exactly one of Queue, Name and Key names the
// scope. Tasks over a limit stay pending, neither failed nor lost.
//
// In the default advisory mode a limited task holds a place in one of the
// limit's blocks while it runs: a block is an advisory lock held by one
// worker's session for as long as any of its tasks uses a place in it, one
// place below a Max of 512 (one slot lock per task) and Max/256 places from
// there up, so that a limit far above what runs costs a few locks, not one
// per task. A worker that dies frees its blocks with its session; a binding
// limit of 512 or more may leave up to Max/256 - 1 places per worker
// unused while work waits. A limit applies to claims made after it is
// set; lowering it stops new claims but never cancels running tasks.
type Limit struct {
	// Queue limits the tasks of one queue.
	Queue string
	// Name limits the tasks of one task name, in any queue.
	Name string
	// Key limits the tasks whose limit key (WithLimitKey) matches this
	// pattern, each key on its own: "tenant:*" lets at most Max tasks of
	// each tenant run. '*' matches any run of characters; nothing else is
	// special.
	Key string
	// Max is how many tasks of the scope may run at once, at least 1.
	Max int

	// Set by Limits: the tasks of the scope running now (a key pattern:
	// of every matching key together), the most of any one matching key,
	// and when the limit was last set.
	Running   int
	Busiest   int
	UpdatedAt time.Time
}

// kind returns the limit's kind and target as skiplock_limits stores them.
func (l Limit) kind() (kind, target string, err error) {
	n := 0
	for _, s := range []string{l.Queue, l.Name, l.Key} {
		if s != "" {
			n++
		}
	}
	switch {
	case n != 1:
		return "", "", fmt.Errorf("%w: set exactly one of Queue, Name and Key", ErrInvalidLimit)
	case l.Queue != "" && len(l.Queue) > MaxNameLength:
		return "", "", fmt.Errorf("%w: queue name must be 1 to %d bytes", ErrInvalidLimit, MaxNameLength)
	case l.Name != "" && len(l.Name) > MaxNameLength:
		return "", "", fmt.Errorf("%w: task name must be 1 to %d bytes", ErrInvalidLimit, MaxNameLength)
	case len(l.Key) > 1024:
		return "", "", fmt.Errorf("%w: key pattern must be at most 1024 bytes", ErrInvalidLimit)
	case l.Queue != "":
		return "queue", l.Queue, nil
	case l.Name != "":
		return "name", l.Name, nil
	default:
		return "key", l.Key, nil
	}
}

// String names the limit's scope as the skiplock command does:
// "queue reports", "name email.send", "key tenant:*".
func (l Limit) String() string {
	kind, target, err := l.kind()
	if err != nil {
		return "invalid limit"
	}
	return kind + " " + target
}

// SetLimit sets a concurrency limit, or changes its Max. Workers apply it
// from their next claim; a raised queue limit wakes them at once, others
// within their PollInterval. The change and its audit record are one
// transaction.
func (c *Client) SetLimit(ctx context.Context, l Limit) error {
	kind, target, err := l.kind()
	if err != nil {
		return err
	}
	if l.Max < 1 || l.Max > 1<<30 {
		return fmt.Errorf("%w: %s: max must be 1 to %d, got %d", ErrInvalidLimit, l, 1<<30, l.Max)
	}
	a, err := c.newAudit(ctx, nil, AuditLimitSet, map[string]any{"limit": l.String(), "max": l.Max})
	if err != nil {
		return err
	}
	work, _, err := c.channels(ctx)
	if err != nil {
		return fmt.Errorf("setting limit %s: %w", l, err)
	}
	err = a.once(ctx, func(tx pgerr.Executor) (int64, error) {
		if err := c.queries.LimitSet(ctx, tx, db.LimitSetParams{Kind: kind, Target: target, MaxRunning: int32(l.Max)}); err != nil {
			return 0, err
		}
		if kind != "queue" {
			return 1, nil
		}
		return 1, c.queries.QueueNotify(ctx, tx, db.QueueNotifyParams{Channel: work, Queues: []string{target}})
	})
	if err != nil {
		return fmt.Errorf("setting limit %s: %w", l, err)
	}
	return nil
}

// RemoveLimit removes the limit with l's scope (Max is ignored). It fails
// with ErrLimitNotFound when no such limit is set, and then changes and
// records nothing. The change and its audit record are one transaction.
func (c *Client) RemoveLimit(ctx context.Context, l Limit) error {
	kind, target, err := l.kind()
	if err != nil {
		return err
	}
	a, err := c.newAudit(ctx, nil, AuditLimitRemove, map[string]any{"limit": l.String()})
	if err != nil {
		return err
	}
	err = a.once(ctx, func(tx pgerr.Executor) (int64, error) {
		removed, err := c.queries.LimitDelete(ctx, tx, db.LimitDeleteParams{Kind: kind, Target: target})
		if err == nil && removed == 0 {
			err = ErrLimitNotFound
		}
		return removed, err
	})
	if err != nil {
		return fmt.Errorf("removing limit %s: %w", l, err)
	}
	if kind == "queue" {
		// Tasks held back by it may run now.
		if work, _, err := c.channels(ctx); err == nil {
			_ = c.queries.QueueNotify(ctx, c.exec, db.QueueNotifyParams{Channel: work, Queues: []string{target}})
		}
	}
	return nil
}

// Limits lists every concurrency limit with how many of its tasks run now.
func (c *Client) Limits(ctx context.Context) ([]Limit, error) {
	rows, err := c.queries.LimitList(ctx, c.exec)
	if err != nil {
		return nil, fmt.Errorf("listing limits: %w", err)
	}
	out := make([]Limit, 0, len(rows))
	for _, r := range rows {
		l := Limit{Max: int(r.MaxRunning), Running: int(r.Running), Busiest: int(r.Busiest), UpdatedAt: r.UpdatedAt}
		switch r.Kind {
		case "queue":
			l.Queue = r.Target
		case "name":
			l.Name = r.Target
		default:
			l.Key = r.Target
		}
		out = append(out, l)
	}
	return out, nil
}
