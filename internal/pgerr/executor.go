package pgerr

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Executor runs statements: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx (the
// generated code's db.DBTX).
type Executor interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Interpreting returns x with every error of its statements passed through
// Interpret: the errors of Exec, of Query and of reading its rows, of
// QueryRow's Scan. The code above it sees skiplock's errors only.
func Interpreting(x Executor) Executor {
	if i, ok := x.(interpreting); ok {
		return i
	}
	return interpreting{x}
}

type interpreting struct{ x Executor }

func (i interpreting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := i.x.Exec(ctx, sql, args...)
	return tag, Interpret(err)
}

func (i interpreting) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := i.x.Query(ctx, sql, args...)
	if err != nil {
		return rows, Interpret(err)
	}
	return interpretedRows{rows}, nil
}

func (i interpreting) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return interpretedRow{i.x.QueryRow(ctx, sql, args...)}
}

type interpretedRows struct{ pgx.Rows }

func (r interpretedRows) Err() error { return Interpret(r.Rows.Err()) }

type interpretedRow struct{ row pgx.Row }

func (r interpretedRow) Scan(dest ...any) error { return Interpret(r.row.Scan(dest...)) }
