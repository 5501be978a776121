package pgerr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestNoSchema(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ searchPath, schema, message string }{
		{"nosuch", "nosuch", `skiplock: schema "nosuch" does not exist: create it (CREATE SCHEMA "nosuch"), then migrate up`},
		{"Jobs, public", "jobs", `skiplock: schema "jobs" does not exist (first in search_path "Jobs, public", none of which exists): create it (CREATE SCHEMA "jobs"), then migrate up`},
		{`"$user", public`, "app", `skiplock: schema "app" does not exist (first in search_path "\"$user\", public", none of which exists): create it (CREATE SCHEMA "app"), then migrate up`},
		{`"My ""Q"", x",y`, `My "Q", x`, `skiplock: schema "My \"Q\", x" does not exist (first in search_path "\"My \"\"Q\"\", x\",y", none of which exists): create it (CREATE SCHEMA "My ""Q"", x"), then migrate up`},
		{"", "", `skiplock: the search_path "" names no schema: set one (postgres://...?search_path=SCHEMA)`},
	} {
		err := NoSchema(c.searchPath, "app")
		var ns *NoSchemaError
		if !errors.As(err, &ns) || ns.Schema != c.schema || err.Error() != c.message || !errors.Is(err, ErrNotMigrated) {
			t.Errorf("NoSchema(%q):\n got %q (schema %q)\nwant %q (schema %q)", c.searchPath, err, ns.Schema, c.message, c.schema)
		}
	}
}

func TestInterpret(t *testing.T) {
	t.Parallel()
	server := func(code, constraint string) error {
		return fmt.Errorf("running a query: %w", &pgconn.PgError{Code: code, Message: "m", ConstraintName: constraint})
	}
	connection := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	if Interpret(nil) != nil {
		t.Error("Interpret(nil) is not nil")
	}
	if err := Interpret(fmt.Errorf("scanning: %w", pgx.ErrNoRows)); err != ErrNotFound {
		t.Errorf("no rows: %v, want ErrNotFound", err)
	}
	for _, code := range []string{pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn, pgerrcode.UndefinedFunction} {
		err := Interpret(server(code, ""))
		if !errors.Is(err, ErrNotMigrated) || Interpret(err) != err {
			t.Errorf("%s: %v, want ErrNotMigrated, the same when interpreted again", code, err)
		}
	}
	if err := server(pgerrcode.SyntaxError, ""); Interpret(err) != err || Interpret(connection) != connection {
		t.Error("other errors are not returned unchanged")
	}

	for code, want := range map[string]bool{
		pgerrcode.AdminShutdown: true, pgerrcode.CrashShutdown: true, pgerrcode.CannotConnectNow: true,
		pgerrcode.QueryCanceled: false, pgerrcode.TooManyConnections: false, "": false,
	} {
		err := error(connection)
		if code != "" {
			err = server(code, "")
		}
		if IsServerUnavailable(err) != want {
			t.Errorf("IsServerUnavailable(%q) = %v, want %v", code, !want, want)
		}
	}

	// A task the server refused: skiplock's functions (22001 over a limit,
	// 22023 other bad input, messages "skiplock: invalid task..."), the task
	// table's checks (23514).
	refusal := func(code, message, table string) error {
		return fmt.Errorf("enqueueing: %w", &pgconn.PgError{Code: code, Message: message, TableName: table})
	}
	for _, c := range []struct {
		err     error
		invalid bool
		message string
	}{
		{refusal(pgerrcode.StringDataRightTruncationDataException, "skiplock: invalid task: payload is 2,000,002 bytes, over the 1,048,576-byte limit (skiplock.max_payload_bytes)", ""),
			true, "skiplock: invalid task: payload is 2,000,002 bytes, over the 1,048,576-byte limit (skiplock.max_payload_bytes)"},
		{refusal(pgerrcode.InvalidParameterValue, "skiplock: invalid task 2: priority 40000 is outside -32768..32767", ""),
			true, "skiplock: invalid task 2: priority 40000 is outside -32768..32767"},
		{refusal(pgerrcode.CheckViolation, `new row for relation "skiplock_tasks" violates check constraint "skiplock_tasks_name_check"`, "skiplock_tasks"),
			true, `skiplock: invalid task: new row for relation "skiplock_tasks" violates check constraint "skiplock_tasks_name_check"`},
		{refusal(pgerrcode.InvalidParameterValue, "skiplock: setting skiplock.max_payload_bytes is 'x', not a number of bytes", ""), false, ""},
		{refusal(pgerrcode.StringDataRightTruncationDataException, "value too long for type character varying(3)", ""), false, ""},
		{refusal(pgerrcode.CheckViolation, "violates check constraint", "orders"), false, ""},
	} {
		err := Interpret(c.err)
		var pgErr *pgconn.PgError
		switch {
		case errors.Is(err, ErrInvalidTask) != c.invalid || !errors.As(err, &pgErr):
			t.Errorf("%v: interpreted %v, ErrInvalidTask %v, want %v (keeping the PgError)", c.err, err, errors.Is(err, ErrInvalidTask), c.invalid)
		case c.invalid && (err.Error() != c.message || Interpret(err) != err):
			t.Errorf("%v: interpreted %q, want %q, the same when interpreted again", c.err, err, c.message)
		case !c.invalid && err != c.err:
			t.Errorf("%v: changed to %v", c.err, err)
		}
	}

	for _, c := range []struct {
		err                                              error
		retryable, refused, lockFull, taken, lockTimeout bool
	}{
		{connection, true, false, false, false, false},
		{server(pgerrcode.AdminShutdown, ""), true, false, false, false, false},
		{server(pgerrcode.ConnectionFailure, ""), true, false, false, false, false},
		{server(pgerrcode.TooManyConnections, ""), true, false, false, false, false},
		{server(pgerrcode.OutOfMemory, ""), true, false, true, false, false},
		{server(pgerrcode.SerializationFailure, ""), true, false, false, false, false},
		{server(pgerrcode.InvalidPassword, ""), false, true, false, false, false},
		{server(pgerrcode.InvalidAuthorizationSpecification, ""), false, true, false, false, false},
		{server(pgerrcode.InvalidCatalogName, ""), false, true, false, false, false},
		{server(pgerrcode.UniqueViolation, ExclusiveRunningIndex), false, false, false, true, false},
		{server(pgerrcode.UniqueViolation, "skiplock_tasks_unique_key_idx"), false, false, false, false, false},
		{server(pgerrcode.ReadOnlySQLTransaction, ""), false, false, false, false, false},
		{server(pgerrcode.LockNotAvailable, ""), false, false, false, false, true},
	} {
		if Retryable(c.err) != c.retryable || IsLoginRefused(c.err) != c.refused ||
			IsLockTableFull(c.err) != c.lockFull || IsExclusiveKeyTaken(c.err) != c.taken || IsLockTimeout(c.err) != c.lockTimeout {
			t.Errorf("%v (%s): retryable %v, login refused %v, lock table full %v, exclusive key taken %v, lock timeout %v; want %v %v %v %v %v",
				c.err, Code(c.err), Retryable(c.err), IsLoginRefused(c.err), IsLockTableFull(c.err), IsExclusiveKeyTaken(c.err), IsLockTimeout(c.err),
				c.retryable, c.refused, c.lockFull, c.taken, c.lockTimeout)
		}
	}
}

// TestPermissionDenied: insufficient_privilege becomes one readable error
// wrapping ErrPermissionDenied and the server's error (its SQLSTATE still
// reads, and it is not retryable); interpreting it again changes nothing.
func TestPermissionDenied(t *testing.T) {
	t.Parallel()
	server := fmt.Errorf("claiming: %w", &pgconn.PgError{Code: pgerrcode.InsufficientPrivilege, Message: "permission denied for table skiplock_queues"})
	err := Interpret(server)
	if !errors.Is(err, ErrPermissionDenied) || Code(err) != pgerrcode.InsufficientPrivilege || Retryable(err) || Interpret(err) != err {
		t.Fatalf("%v: permission denied %v, code %q, retryable %v", err, errors.Is(err, ErrPermissionDenied), Code(err), Retryable(err))
	}
	want := "skiplock: permission denied for table skiplock_queues: the database role lacks a privilege it needs; " +
		"`skiplock migrate grants --role ROLE --kind producer|worker|observer|operator` prints each kind's grants (SQLSTATE 42501)"
	if err.Error() != want {
		t.Errorf("message:\n got %s\nwant %s", err, want)
	}
	err = NoUsage("My Jobs", "app")
	want = `skiplock: permission denied: role "app" has no USAGE on schema "My Jobs", so its search_path skips it: ` +
		"GRANT USAGE ON SCHEMA \"My Jobs\" TO \"app\" (`skiplock migrate grants` prints every grant of the role's kind)"
	if !errors.Is(err, ErrPermissionDenied) || err.Error() != want {
		t.Errorf("NoUsage:\n got %s\nwant %s", err, want)
	}
	if FirstSchema(`"$user", public`, "app") != "app" {
		t.Errorf("FirstSchema: %q", FirstSchema(`"$user", public`, "app"))
	}
}
