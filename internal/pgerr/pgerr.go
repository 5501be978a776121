// Package pgerr turns driver errors into skiplock's errors, in one place
// (as River's interpretError): Interpret, and Interpreting, an executor that
// applies it to every statement. SQLSTATEs are named by pgerrcode and read
// only here.
package pgerr

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotMigrated is returned when skiplock's tables are missing from the
// database (or from the search_path).
var ErrNotMigrated = errors.New("skiplock: schema not migrated: run `skiplock migrate up` (or migrations.Up from Go)")

// NoSchemaError is returned when no schema of the session's search_path
// exists, so that skiplock's tables can be neither found nor created there.
// It wraps ErrNotMigrated.
type NoSchemaError struct {
	// SearchPath is the search_path as set (the URL's search_path).
	SearchPath string
	// Schema is its first schema, "$user" resolved: the one to create.
	// Empty when the search_path names none.
	Schema string
}

// NoSchema returns the NoSchemaError of a session whose search_path, as
// set, names no schema that exists; user is the session's user.
func NoSchema(searchPath, user string) error {
	return &NoSchemaError{SearchPath: searchPath, Schema: firstSchema(searchPath, user)}
}

func (e *NoSchemaError) Error() string {
	if e.Schema == "" {
		return fmt.Sprintf("skiplock: the search_path %q names no schema: set one (postgres://...?search_path=SCHEMA)", e.SearchPath)
	}
	in := ""
	if e.SearchPath != e.Schema {
		in = fmt.Sprintf(" (first in search_path %q, none of which exists)", e.SearchPath)
	}
	return fmt.Sprintf("skiplock: schema %q does not exist%s: create it (CREATE SCHEMA %s), then migrate up",
		e.Schema, in, pgx.Identifier{e.Schema}.Sanitize())
}

func (e *NoSchemaError) Unwrap() error { return ErrNotMigrated }

// FirstSchema is the first schema a search_path setting names, as
// PostgreSQL reads it, "$user" standing for user; "" when it names none.
func FirstSchema(searchPath, user string) string { return firstSchema(searchPath, user) }

// NoUsage returns the error of a session whose role has no USAGE on
// schema, the first of its search_path: PostgreSQL leaves such a schema
// out of the search_path, so skiplock's tables look missing. It wraps
// ErrPermissionDenied.
func NoUsage(schema, role string) error {
	return fmt.Errorf("%w: role %s has no USAGE on schema %s, so its search_path skips it: "+
		"GRANT USAGE ON SCHEMA %s TO %s (`skiplock migrate grants` prints every grant of the role's kind)",
		ErrPermissionDenied, pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize(),
		pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize())
}

// firstSchema is the first name of a search_path setting as PostgreSQL
// reads it: an unquoted name folds to lower case, "" in a quoted one is a
// quote, and $user is the session's user.
func firstSchema(searchPath, user string) string {
	s := strings.TrimSpace(searchPath)
	var name string
	if rest, quoted := strings.CutPrefix(s, `"`); quoted {
		var b strings.Builder
		for i := 0; i < len(rest); i++ {
			if rest[i] == '"' {
				if i+1 < len(rest) && rest[i+1] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				break
			}
			b.WriteByte(rest[i])
		}
		name = b.String()
	} else {
		name, _, _ = strings.Cut(s, ",")
		name = strings.ToLower(strings.TrimSpace(name))
	}
	if name == "$user" {
		return user
	}
	return name
}

// ErrNotFound is what a statement that expects a row returns when there is
// none (pgx.ErrNoRows, interpreted): each caller says what was not found.
var ErrNotFound = errors.New("skiplock: not found")

// ErrInvalidTask is queue.ErrInvalidTask: a task that was not inserted
// because of what it carries. Interpret wraps it around the server's own
// refusals of a task (the checks of the SQL enqueue functions and the task
// table's constraints), so that they read as the Go client's.
var ErrInvalidTask = errors.New("skiplock: invalid task")

// invalidTaskPrefix begins the message of every refusal of a task raised by
// skiplock's SQL functions (migrations 6, 11 and 14): "skiplock: invalid
// task: ..." or, from skiplock_enqueue_many, "skiplock: invalid task 2: ...".
const invalidTaskPrefix = "skiplock: invalid task"

// taskError is a task the server refused: it is ErrInvalidTask for
// errors.Is, and keeps the server's error for errors.As.
type taskError struct{ pg *pgconn.PgError }

func (e *taskError) Error() string {
	if strings.HasPrefix(e.pg.Message, invalidTaskPrefix) {
		return e.pg.Message
	}
	return fmt.Sprintf("%s: %s", ErrInvalidTask, e.pg.Message)
}

func (e *taskError) Unwrap() []error { return []error{ErrInvalidTask, e.pg} }

// isTaskRefusal: a refusal by a skiplock function (22001 over a limit, 22023
// any other bad input) or a check constraint of the task table (23514).
func isTaskRefusal(e *pgconn.PgError) bool {
	switch e.Code {
	case pgerrcode.StringDataRightTruncationDataException, pgerrcode.InvalidParameterValue:
		return strings.HasPrefix(e.Message, invalidTaskPrefix)
	case pgerrcode.CheckViolation:
		return e.TableName == "skiplock_tasks"
	}
	return false
}

// ErrPermissionDenied is wrapped by the error of a statement that the
// session's role may not run (SQLSTATE 42501, insufficient_privilege): a
// role missing a grant of its kind (skiplock migrate grants prints them).
var ErrPermissionDenied = errors.New("skiplock: permission denied")

// permissionError is a server's insufficient_privilege, worded for the
// person who has to grant the privilege. It wraps ErrPermissionDenied and
// the server's error.
type permissionError struct{ pg *pgconn.PgError }

func (e *permissionError) Error() string {
	return fmt.Sprintf("skiplock: %s: the database role lacks a privilege it needs; "+
		"`skiplock migrate grants --role ROLE --kind producer|worker|observer|operator` prints each kind's grants (SQLSTATE %s)",
		e.pg.Message, e.pg.Code)
}

func (e *permissionError) Unwrap() []error { return []error{ErrPermissionDenied, e.pg} }

// ExclusiveRunningIndex is the unique index that lets one task of an
// exclusive key run at a time (migrations/000003): two claims that race
// for one key meet there.
const ExclusiveRunningIndex = "skiplock_tasks_exclusive_running_idx"

// Interpret turns a driver error into skiplock's: no row becomes
// ErrNotFound; a missing table, column or function (skiplock's schema is
// absent or too old) becomes ErrNotMigrated; a task the server refused
// (over a limit, bad input, a check of the task table) wraps
// ErrInvalidTask, keeping the *pgconn.PgError; a missing privilege wraps
// ErrPermissionDenied (and the server's error, whose SQLSTATE Code still
// reads). Other errors, and nil, are returned unchanged, so it is safe to
// apply twice. Code outside this package reads no SQLSTATE: it asks the
// functions below.
func Interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if errors.Is(err, ErrPermissionDenied) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn, pgerrcode.UndefinedFunction:
			return fmt.Errorf("%w (%s)", ErrNotMigrated, pgErr.Message)
		case pgerrcode.InsufficientPrivilege:
			return &permissionError{pgErr}
		}
		if isTaskRefusal(pgErr) && !errors.Is(err, ErrInvalidTask) {
			return &taskError{pg: pgErr}
		}
	}
	return err
}

// Code is the SQLSTATE of an error the server sent; "" for any other
// error (a failure to reach the server, a timeout).
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// IsLockTableFull reports whether err is PostgreSQL's "out of shared
// memory", which a claim gets when the shared lock table, shared by every
// session of the server, has no room for more advisory locks.
func IsLockTableFull(err error) bool {
	return Code(err) == pgerrcode.OutOfMemory
}

// IsLockTimeout reports whether err is a statement that waited for a lock
// longer than lock_timeout allows (lock_not_available), as a claim's wait
// for its queue's claim turn does.
func IsLockTimeout(err error) bool {
	return Code(err) == pgerrcode.LockNotAvailable
}

// IsExclusiveKeyTaken reports whether err is a claim that lost a race for
// an exclusive key: a unique violation of ExclusiveRunningIndex.
func IsExclusiveKeyTaken(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation && pgErr.ConstraintName == ExclusiveRunningIndex
}

// IsServerUnavailable reports whether the server refused or ended the
// session because it is shutting down, crashed, or is starting up or
// recovering: a database that is not available, as a refused connection is.
func IsServerUnavailable(err error) bool {
	switch Code(err) {
	case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow:
		return true
	}
	return false
}

// IsLoginRefused reports whether the server refused a connection for good:
// wrong user or password, no pg_hba.conf entry, no such database. Waiting
// does not fix these.
func IsLoginRefused(err error) bool {
	c := Code(err)
	return c != "" && (pgerrcode.IsInvalidAuthorizationSpecification(c) || c == pgerrcode.InvalidCatalogName)
}

// Retryable reports whether a statement that failed with err may succeed if
// sent again: the connection failed (no server error at all), or the server
// reported a connection exception, operator intervention (shutdown, a
// cancelled query), insufficient resources or a transaction rollback
// (serialization failure, deadlock).
func Retryable(err error) bool {
	c := Code(err)
	if c == "" {
		return true // the connection, not the statement
	}
	return pgerrcode.IsConnectionException(c) || pgerrcode.IsOperatorIntervention(c) ||
		pgerrcode.IsInsufficientResources(c) || pgerrcode.IsTransactionRollback(c)
}

// ConnectCause is the innermost error of a failed connection, without the
// repetitions of pgx's report of each attempt (pgx tries each address, and
// with sslmode=prefer each twice, and lists every try).
func ConnectCause(err error) string {
	for {
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			if len(errs) == 0 {
				return err.Error()
			}
			err = errs[len(errs)-1]
		case interface{ Unwrap() error }:
			next := u.Unwrap()
			if next == nil {
				return err.Error()
			}
			err = next
		default:
			return err.Error()
		}
	}
}
