// Package pgerr turns driver errors into skiplock's errors, in one place.
package pgerr

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotMigrated is returned when skiplock's tables are missing from the
// database (or from the search_path).
var ErrNotMigrated = errors.New("skiplock: schema not migrated: run `skiplock migrate up` (or migrations.Up from Go)")

// Wrap maps PostgreSQL errors with a skiplock meaning to skiplock's errors
// and returns others unchanged.
func Wrap(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "42703", "42883": // undefined table, column, function
			return fmt.Errorf("%w (%s)", ErrNotMigrated, pgErr.Message)
		}
	}
	return err
}

// IsLockTableFull reports whether err is PostgreSQL's "out of shared
// memory" (53200), which a claim gets when the shared lock table, shared by
// every session of the server, has no room for more advisory locks.
func IsLockTableFull(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53200"
}
