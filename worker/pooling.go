package worker

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrTransactionPooling is returned by Run in advisory mode when the pool's
// connections are shared per transaction (PgBouncer pool_mode=transaction):
// session advisory locks cannot guard tasks there.
var ErrTransactionPooling = errors.New("skiplock: the database connections are pooled per transaction " +
	"(PgBouncer pool_mode=transaction or similar), where session advisory locks do not work: " +
	"set worker.Config.Mode = worker.ModeLease, or connect directly or through a session-mode pooler")

// ErrStatementCache is returned by Run in lease mode behind a transaction
// pooler when the pool caches prepared statements, which such a pooler
// hands to the wrong server connection.
var ErrStatementCache = errors.New("skiplock: the pool caches prepared statements, which break behind a " +
	"transaction pooler: add default_query_exec_mode=exec to the connection URL " +
	"(or set ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec)")

// transactionPooled reports whether the pool's connections share server
// sessions between transactions. Two client connections that are both open
// never share a backend when connected directly; behind a transaction
// pooler the second usually gets the backend the first just released.
// A pooler that happens to hand out different backends every time goes
// unnoticed here, so the lock session also watches its backend pid.
func transactionPooled(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	// Both at once: a new connection takes several round trips.
	type acquired struct {
		c   *pgxpool.Conn
		err error
	}
	other := make(chan acquired, 1)
	go func() {
		c, err := pool.Acquire(ctx)
		other <- acquired{c, err}
	}()
	a, err := pool.Acquire(ctx)
	got := <-other
	if got.c != nil {
		defer got.c.Release()
	}
	if err != nil {
		return false, err
	}
	defer a.Release()
	if got.err != nil {
		return false, got.err
	}
	b := got.c
	pid := func(c *pgxpool.Conn) (int32, error) {
		var p int32
		// The simple protocol: no prepared statement to confuse a pooler.
		err := c.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&p)
		return p, err
	}
	seenA := map[int32]bool{}
	for range 4 {
		pa, err := pid(a)
		if err != nil {
			return false, err
		}
		pb, err := pid(b)
		if err != nil {
			return false, err
		}
		if pa == pb || (len(seenA) > 0 && !seenA[pa]) {
			return true, nil
		}
		seenA[pa] = true
	}
	return false, nil
}

func cachesStatements(pool *pgxpool.Pool) bool {
	switch pool.Config().ConnConfig.DefaultQueryExecMode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe:
		return true
	}
	return false
}
