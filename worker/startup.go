package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/schema"
)

// startAttemptTimeout bounds one attempt at start; between attempts, the
// worker waits as redial says.
const startAttemptTimeout = 30 * time.Second

// errReadOnly is a start attempt's error on a server that refuses writes.
var errReadOnly = errors.New("the server is read-only (a standby, or a primary not yet open for writes after a failover): " +
	"with several hosts, add target_session_attrs=read-write to the URL so that connections go to the primary")

// start checks the database and the schema and sets up what Run needs;
// opened then opens the guard, which registers the worker (Run starts its
// listener in between, so that the two connect at once). While the
// database cannot be reached, or only in read-only mode, both retry with
// backoff; they return an error only for a configuration error
// (isConfigError) or when ctx ends.
func (w *Worker) start(ctx context.Context) (opened func() error, err error) {
	o := &outage{log: w.log, what: "starting"}
	var table db.SchemaTaskTableRow
	var limitClass int64
	// Every read of start is in the retried step: a connection lost
	// between two of them is an outage like any other, not Run's error.
	err = untilAvailable(ctx, o, w.pool, func(ctx context.Context) (err error) {
		table, limitClass, err = w.checkDatabase(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	w.channel, w.control = schema.Channels(table.Schema)
	w.limits = newClaimLimits(w.cfg, w.handled)

	w.classOID = table.Oid
	w.limitClass = int32(uint32(limitClass))
	switch {
	case w.slots != nil:
		// A shard's of a ShardedWorker, made with the others' (shareslots.go).
	case w.cfg.autoWindow:
		w.slots = newSlots(maxAutoConcurrency, w.cfg.ClaimBatch)
	default:
		w.slots = newSlots(w.cfg.Concurrency, w.cfg.ClaimBatch)
	}
	free := func(batch []finish) {
		w.slots.free(batch)
		w.iso.freed(batch)
	}
	w.comp = newCompleter(w.writeFinishes, w.guard.release, free, w.wake, w.log, 1)
	w.handoffs = nil
	if g, ok := w.guard.(*advisoryGuard); ok {
		wait := w.cfg.handoffWait
		if wait <= 0 {
			wait = handoffWait
		}
		w.handoffs = &handoffs{wait: wait, fallback: func(batch []finish) {
			for _, f := range batch {
				w.comp.add(f)
			}
		}}
		g.handoffs, g.onCarried = w.handoffs, w.carried
	}
	w.window = newWindowSizer(w, w.cfg.autoWindow, w.cfg.autoBatch)
	return func() error { return w.guard.open(ctx, table.Oid, o) }, nil
}

// checkDatabase is one attempt at the checks of start: are sessions real,
// is the schema there and current, are writes accepted; and it reads the
// class of the limits' locks.
func (w *Worker) checkDatabase(ctx context.Context) (table db.SchemaTaskTableRow, limitClass int64, err error) {
	// Are sessions real? Asked on two connections of their own while the
	// schema is read on a third: across a network each check is a handful
	// of round trips, and a worker waits for all of them before its first
	// claim. The schema's statements are unnamed (customPlans), which no
	// pooler breaks; the pooler's verdict comes first all the same.
	type verdict struct {
		pooled bool
		err    error
	}
	checked := make(chan verdict, 1)
	go func() {
		pooled, err := transactionPooled(ctx, w.pool)
		checked <- verdict{pooled, err}
	}()
	// The schema's own version (skiplock_schema_version()), so that a
	// schema applied by any migration tool is accepted.
	info, schemaErr := schema.Read(ctx, customPlans{w.pool})
	var readOnly bool
	var readErr, classErr error
	if schemaErr == nil && schema.Check(info) == nil {
		readOnly, readErr = w.queries.SessionReadOnly(ctx, customPlans{w.pool})
		if readErr == nil && !readOnly {
			limitClass, classErr = w.queries.LimitLockClass(ctx, customPlans{w.pool})
		}
	}
	v := <-checked
	if v.err != nil {
		return table, 0, fmt.Errorf("skiplock: connecting to the database: %w", pgerr.Interpret(v.err))
	}
	if err := w.guard.checkPooling(v.pooled); err != nil {
		return table, 0, err
	}
	if schemaErr != nil {
		if errors.Is(schemaErr, pgerr.ErrNotMigrated) {
			return table, 0, schemaErr
		}
		return table, 0, fmt.Errorf("skiplock: connecting to the database: %w", schemaErr)
	}
	if err := schema.Check(info); err != nil {
		return table, 0, err
	}
	table = db.SchemaTaskTableRow{Oid: info.TableOID, Schema: info.Name}
	if readErr != nil {
		return table, 0, fmt.Errorf("skiplock: connecting to the database: %w", readErr)
	}
	if readOnly {
		return table, 0, fmt.Errorf("skiplock: %w", errReadOnly)
	}
	if classErr != nil {
		return table, 0, fmt.Errorf("skiplock: reading the schema: %w", pgerr.Interpret(classErr))
	}
	return table, limitClass, nil
}

// untilAvailable runs step until it succeeds, fails with a configuration
// error, or ctx ends, with backoff between attempts that ends early when
// pool's server can be reached again (redial). It logs through o once per
// change of state, not per attempt.
func untilAvailable(ctx context.Context, o *outage, pool *pgxpool.Pool, step func(context.Context) error) error {
	r := newRedial(&pool.Config().ConnConfig.Config)
	for {
		actx, cancel := context.WithTimeout(ctx, startAttemptTimeout)
		err := step(actx)
		cancel()
		if err == nil {
			o.ok()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if isConfigError(err) {
			return err
		}
		r.failed(err)
		o.failed(err, "retry_in", r.next())
		if !r.sleep(ctx) {
			return ctx.Err()
		}
	}
}

// isConfigError reports whether a start attempt failed in a way that
// waiting cannot fix, so that Run returns it: a schema that is not migrated
// (or is dirty), a transaction pooler in advisory mode or a statement cache
// behind one, a server that refuses the login (SQLSTATE class 28: wrong
// user or password, no pg_hba.conf entry) or has no such database (3D000),
// a role that lacks a grant workers need (queue.ErrPermissionDenied).
// Everything else (refused or timed-out connections, a server starting up
// or shutting down, too many connections, a read-only server) is an outage
// and is retried.
func isConfigError(err error) bool {
	if errors.Is(err, pgerr.ErrNotMigrated) || errors.Is(err, ErrTransactionPooling) || errors.Is(err, ErrStatementCache) ||
		errors.Is(pgerr.Interpret(err), pgerr.ErrPermissionDenied) {
		return true
	}
	return pgerr.IsLoginRefused(err)
}
