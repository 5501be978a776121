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

// start checks the database and the schema, sets up what Run needs, and
// opens the guard, which registers the worker. While the database cannot be reached, or only in
// read-only mode, it retries with backoff; it returns an error only for a
// configuration error (isConfigError) or when ctx ends.
func (w *Worker) start(ctx context.Context) error {
	o := &outage{log: w.log, what: "starting"}
	var table db.SchemaTaskTableRow
	var limitClass int64
	// Every read of start is in the retried step: a connection lost
	// between two of them is an outage like any other, not Run's error.
	err := untilAvailable(ctx, o, w.pool, func(ctx context.Context) (err error) {
		if table, err = w.checkDatabase(ctx); err != nil {
			return err
		}
		if limitClass, err = w.queries.LimitLockClass(ctx, w.pool); err != nil {
			return fmt.Errorf("skiplock: reading the schema: %w", pgerr.Interpret(err))
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.channel, w.control = schema.Channels(table.Schema)
	w.limits = newClaimLimits(w.cfg)

	w.classOID = table.Oid
	w.limitClass = int32(uint32(limitClass))
	if w.cfg.autoWindow {
		w.slots = newSlots(MaxAutoConcurrency, w.cfg.ClaimBatch)
	} else {
		w.slots = newSlots(w.cfg.Concurrency, w.cfg.ClaimBatch)
	}
	w.comp = newCompleter(w.writeFinishes, w.guard.release, w.slots.free, w.wake, w.log, 1)
	w.window = newWindowSizer(w, w.cfg.autoWindow, w.cfg.autoBatch)
	return w.guard.open(ctx, table.Oid, o)
}

// checkDatabase is one attempt at the checks of start: are sessions real,
// is the schema there and current, are writes accepted.
func (w *Worker) checkDatabase(ctx context.Context) (db.SchemaTaskTableRow, error) {
	var table db.SchemaTaskTableRow
	// First, before any statement that a pooler could break: are sessions
	// real?
	pooled, err := transactionPooled(ctx, w.pool)
	if err != nil {
		return table, fmt.Errorf("skiplock: connecting to the database: %w", pgerr.Interpret(err))
	}
	if err := w.guard.checkPooling(pooled); err != nil {
		return table, err
	}
	// The schema's own version (skiplock_schema_version()), so that a
	// schema applied by any migration tool is accepted.
	info, err := schema.Read(ctx, w.pool)
	if err != nil {
		if errors.Is(err, ErrNotMigrated) {
			return table, err
		}
		return table, fmt.Errorf("skiplock: connecting to the database: %w", err)
	}
	if err := schema.Check(info); err != nil {
		return table, err
	}
	table = db.SchemaTaskTableRow{Oid: info.TableOID, Schema: info.Name}
	readOnly, err := w.queries.SessionReadOnly(ctx, w.pool)
	if err != nil {
		return table, fmt.Errorf("skiplock: connecting to the database: %w", err)
	}
	if readOnly {
		return table, fmt.Errorf("skiplock: %w", errReadOnly)
	}
	return table, nil
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
// a role that lacks a grant workers need (ErrPermissionDenied).
// Everything else (refused or timed-out connections, a server starting up
// or shutting down, too many connections, a read-only server) is an outage
// and is retried.
func isConfigError(err error) bool {
	if errors.Is(err, ErrNotMigrated) || errors.Is(err, ErrTransactionPooling) || errors.Is(err, ErrStatementCache) ||
		errors.Is(pgerr.Interpret(err), ErrPermissionDenied) {
		return true
	}
	return pgerr.IsLoginRefused(err)
}
