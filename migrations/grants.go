package migrations

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// RoleKind is what a database role does with skiplock; Grants prints the
// privileges each kind needs and nothing more.
type RoleKind string

// The kinds of role. Worker includes Producer (periodic schedules and
// handlers enqueue tasks), and Operator includes Observer.
const (
	// Producer enqueues tasks: queue.Enqueue, EnqueueMany, workflows,
	// sequences, unique tasks, and the SQL functions skiplock_enqueue,
	// skiplock_enqueue_task and skiplock_enqueue_many.
	Producer RoleKind = "producer"
	// Worker runs worker.Run: claims, outcomes, retries, the rescuer,
	// periodic schedules, retention, rate and concurrency limits,
	// heartbeats, LISTEN/NOTIFY; and enqueues, as a producer.
	Worker RoleKind = "worker"
	// Observer reads: the skiplock command's read commands (list, show,
	// stats, locks, queue list, limit list, workflow and sequence show)
	// and the dashboard's pages. It changes nothing.
	Observer RoleKind = "observer"
	// Operator is an observer that also requeues, cancels, runs now,
	// deletes and purges tasks, pauses and resumes queues and sets limits.
	// It does not enqueue: grant it Producer too for that.
	Operator RoleKind = "operator"
)

// RoleKinds lists every kind.
var RoleKinds = []RoleKind{Producer, Worker, Observer, Operator}

// ParseRoleKind returns the kind named s, or an error that lists the kinds.
func ParseRoleKind(s string) (RoleKind, error) {
	for _, k := range RoleKinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown role kind %q: want producer, worker, observer or operator", s)
}

// tableGrants is, per table, the privileges of each kind. A table that a
// later migration adds (an audit table, say) gets a row here, readable by
// observers and operators at least (TestGrantsLeastPrivilege fails until
// it has one); a kind that needs nothing of a table is left out of its
// row. "UPDATE (a, b)" grants the columns only.
//
// PostgreSQL asks for UPDATE to lock rows (SELECT ... FOR UPDATE, FOR NO
// KEY UPDATE), and for SELECT to read back rows (RETURNING, ON CONFLICT DO
// UPDATE ... WHERE): several grants below are for those.
var tableGrants = []struct {
	table string
	// optional: the table may be missing (the grant is skipped then).
	optional bool
	kinds    map[RoleKind]string
}{
	{table: "skiplock_tasks", kinds: map[RoleKind]string{
		// A dependent task (queue.WithDependsOn) is recorded on its
		// dependencies, which are locked while it is enqueued: UPDATE of
		// the two columns that records it, no other.
		Producer: "SELECT, INSERT, UPDATE (dependents, workflow_id)",
		// Claims and outcomes update; retention deletes.
		Worker:   "SELECT, INSERT, UPDATE, DELETE",
		Observer: "SELECT",
		// requeue, cancel and run-now update; delete and purge delete.
		Operator: "SELECT, UPDATE, DELETE",
	}},
	{table: "skiplock_workflows", kinds: map[RoleKind]string{
		Producer: "SELECT, INSERT",
		// Retention deletes finished workflows, locking them first.
		Worker:   "SELECT, INSERT, UPDATE, DELETE",
		Observer: "SELECT",
		Operator: "SELECT",
	}},
	{table: "skiplock_batches", kinds: map[RoleKind]string{
		Producer: "SELECT, INSERT",
		// A member's outcome counts in its batch's row (a trigger, with
		// the rights of whoever changes the task); retention deletes
		// batches with no task left.
		Worker:   "SELECT, INSERT, UPDATE, DELETE",
		Observer: "SELECT",
		// requeue, cancel and delete of a member count in its batch too.
		Operator: "SELECT, UPDATE",
	}},
	{table: "skiplock_workers", kinds: map[RoleKind]string{
		// Registration and heartbeats; retention prunes old rows.
		Worker:   "SELECT, INSERT, UPDATE, DELETE",
		Observer: "SELECT",
		Operator: "SELECT",
	}},
	{table: "skiplock_queues", kinds: map[RoleKind]string{
		Worker:   "SELECT", // a claim skips paused queues
		Observer: "SELECT",
		Operator: "SELECT, INSERT, UPDATE", // pause, resume
	}},
	{table: "skiplock_limits", kinds: map[RoleKind]string{
		Worker:   "SELECT",
		Observer: "SELECT",
		Operator: "SELECT, INSERT, UPDATE, DELETE", // limit set, limit remove
	}},
	{table: "skiplock_rate_limits", kinds: map[RoleKind]string{
		Worker:   "SELECT, INSERT, UPDATE",
		Observer: "SELECT",
		Operator: "SELECT",
	}},
	{table: "skiplock_rate_keys", kinds: map[RoleKind]string{
		// Per-key rate limits; the retirer deletes rows of ended windows.
		Worker:   "SELECT, INSERT, UPDATE, DELETE",
		Observer: "SELECT",
		Operator: "SELECT",
	}},
	{table: "skiplock_periodic", kinds: map[RoleKind]string{
		Worker:   "SELECT, INSERT, UPDATE",
		Observer: "SELECT",
		Operator: "SELECT",
	}},
	{table: "skiplock_schedules", kinds: map[RoleKind]string{
		// The elected scheduler reads the stored schedules; their last
		// ticks are skiplock_periodic's.
		Worker:   "SELECT",
		Observer: "SELECT",
		// schedules add, set, pause, resume, remove.
		Operator: "SELECT, INSERT, UPDATE, DELETE",
	}},
	{table: "skiplock_leaders", kinds: map[RoleKind]string{
		Worker:   "SELECT, INSERT, UPDATE, DELETE", // lease mode's elections; the isolation turn (both modes)
		Observer: "SELECT",
		Operator: "SELECT",
	}},
	// The audit trail: its writers append records and update only what a
	// running change updates (its count, its end, the error it stopped
	// on), never who made a change or what it was; at and db_role always
	// take their defaults (now(), current_user). Only retention deletes.
	{table: "skiplock_audit", kinds: map[RoleKind]string{
		// An enqueue made with an actor (skiplock enqueue) records itself,
		// without reading the trail back.
		Producer: "INSERT (" + auditInsert + ")",
		// A worker may enqueue as a producer and make changes as an
		// operator's API calls do; retention deletes old records.
		Worker:   "SELECT, INSERT (" + auditInsert + "), UPDATE (" + auditUpdate + "), DELETE",
		Observer: "SELECT",
		// Every change records itself, and a batched one its progress.
		Operator: "SELECT, INSERT (" + auditInsert + "), UPDATE (" + auditUpdate + ")",
	}},
	{table: "skiplock_locks", kinds: map[RoleKind]string{
		// Named application locks (package worker/lock), which services
		// take as producers or as workers: a name recorded on first use,
		// leases taken (INSERT ... ON CONFLICT DO UPDATE ... WHERE reads
		// the row), renewed and released.
		Producer: "SELECT, INSERT, UPDATE",
		Worker:   "SELECT, INSERT, UPDATE",
		Observer: "SELECT",
		Operator: "SELECT",
	}},
	// Kept by skiplock's own migration runner (missing when another tool
	// applied the migrations): every client reads its dirty flag.
	{table: Table, optional: true, kinds: map[RoleKind]string{
		Producer: "SELECT",
		Worker:   "SELECT",
		Observer: "SELECT",
		Operator: "SELECT",
	}},
}

// The columns of skiplock_audit its writers set: a record's (auditInsert),
// and a running change's (auditUpdate, sql/audit.sql's AuditProgress and
// AuditFinish).
const (
	auditInsert = "actor, source, action, request, affected, finished_at"
	auditUpdate = "affected, finished_at, error"
)

// sequenceGrants: nextval on the tasks' identity sequence reserves the
// IDs of a batch written with COPY, or of a workflow's tasks (an INSERT
// that takes the identity's default needs no grant); on the lock tokens'
// it numbers a lease.
var sequenceGrants = []struct {
	sequence string
	kinds    []RoleKind
}{
	{"skiplock_tasks_id_seq", []RoleKind{Producer, Worker}},
	// A lease lock's fencing token (package worker/lock).
	{"skiplock_locks_token_seq", []RoleKind{Producer, Worker}},
}

// functionGrants: EXECUTE, which PostgreSQL grants to PUBLIC unless the
// database revokes it. Every function runs with its caller's privileges
// (none is SECURITY DEFINER). Trigger functions need no EXECUTE to fire,
// but the functions they call do: skiplock_sequence_advance calls
// skiplock_sequence_release when a worker or an operator finishes,
// cancels or deletes a task of a sequence.
var functionGrants = []struct {
	function string
	kinds    []RoleKind
}{
	{"skiplock_schema_version", []RoleKind{Producer, Worker, Observer, Operator}},
	{"skiplock_enqueue", []RoleKind{Producer, Worker}},
	{"skiplock_enqueue_task", []RoleKind{Producer, Worker}},
	{"skiplock_enqueue_many", []RoleKind{Producer, Worker}},
	{"skiplock_enqueue_replace", []RoleKind{Producer, Worker}},
	{"skiplock_sequence_enter", []RoleKind{Producer, Worker}},
	{"skiplock_sequence_lock_key", []RoleKind{Producer, Worker, Operator}},
	{"skiplock_sequence_release", []RoleKind{Worker, Operator}},
	{"skiplock_sequence_admits", []RoleKind{Operator}}, // requeue
	// The input limits the enqueue functions check (migration 13).
	{"skiplock_input_limit", []RoleKind{Producer, Worker}},
	{"skiplock_check_size", []RoleKind{Producer, Worker}},
	{"skiplock_check_length", []RoleKind{Producer, Worker}},
}

// Grants returns the GRANT statements that give role the privileges of
// kind on skiplock's tables in schema, one statement per element, each
// ending in a semicolon. Run them as the schema's owner or a superuser.
//
// Every kind gets USAGE on the schema and nothing that creates, alters,
// truncates or owns anything. LISTEN, NOTIFY, advisory locks and reading
// pg_locks and pg_stat_activity need no grant. It returns an error for an
// unknown kind or an empty schema or role.
func Grants(schema, role string, kind RoleKind) ([]string, error) {
	if _, err := ParseRoleKind(string(kind)); err != nil {
		return nil, err
	}
	if schema == "" || role == "" {
		return nil, errors.New("migrations: Grants needs a schema and a role")
	}
	s, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	out := []string{fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s;", s, r)}
	for _, t := range tableGrants {
		privileges, ok := t.kinds[kind]
		if !ok {
			continue
		}
		grant := fmt.Sprintf("GRANT %s ON TABLE %s.%s TO %s;", privileges, s, t.table, r)
		if t.optional {
			// A DO block, so that the script runs whether or not the
			// table exists.
			regclass := strings.ReplaceAll(s+"."+t.table, "'", "''")
			if strings.Contains(grant, "$grant$") {
				return nil, fmt.Errorf("migrations: schema %q or role %q contains $grant$", schema, role)
			}
			grant = fmt.Sprintf("DO $grant$ BEGIN IF to_regclass('%s') IS NOT NULL THEN %s END IF; END $grant$;", regclass, grant)
		}
		out = append(out, grant)
	}
	for _, q := range sequenceGrants {
		if slices.Contains(q.kinds, kind) {
			out = append(out, fmt.Sprintf("GRANT USAGE ON SEQUENCE %s.%s TO %s;", s, q.sequence, r))
		}
	}
	for _, f := range functionGrants {
		if slices.Contains(f.kinds, kind) {
			out = append(out, fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s.%s TO %s;", s, f.function, r))
		}
	}
	return out, nil
}

// OptionalGrant is a grant that Grants leaves out because only some
// setups need it.
type OptionalGrant struct {
	// SQL is the statement.
	SQL string
	// Why says when to run it.
	Why string
}

// OptionalGrants returns the grants that some setups want for role of
// kind, beyond Grants: the predefined roles pg_signal_backend and
// pg_read_all_stats. Granting them takes a superuser, or a role with
// CREATEROLE and ADMIN OPTION on them.
func OptionalGrants(role string, kind RoleKind) ([]OptionalGrant, error) {
	if _, err := ParseRoleKind(string(kind)); err != nil {
		return nil, err
	}
	if role == "" {
		return nil, errors.New("migrations: OptionalGrants needs a role")
	}
	r := pgx.Identifier{role}.Sanitize()
	switch kind {
	case Worker:
		return []OptionalGrant{{
			SQL: fmt.Sprintf("GRANT pg_signal_backend, pg_read_all_stats TO %s;", r),
			Why: "when workers run as different roles: the rescuer ends (pg_terminate_backend) the lock session of a " +
				"worker cut off from the database, which a role may do to its own sessions only, or with these two to " +
				"any but a superuser's (pg_read_all_stats shows when the session started)",
		}}, nil
	case Observer, Operator:
		return []OptionalGrant{{
			SQL: fmt.Sprintf("GRANT pg_read_all_stats TO %s;", r),
			Why: "to see, in `skiplock locks` and the dashboard, the client address of other roles' sessions " +
				"and which of them wait for a lock (pg_stat_activity hides those of sessions of other roles)",
		}}, nil
	}
	return nil, nil
}
