// Package migrations holds skiplock's schema as golang-migrate files,
// embedded in the binary, and runs them. It owns the schema, and so the
// error of a schema missing or too old: [ErrNotMigrated], which every
// skiplock package returns wrapped.
//
// Run [Up] at deploy time, or at start, before producers (package queue)
// and workers (package worker) use the schema:
//
//	if err := migrations.Up(ctx, pool); err != nil {
//		return fmt.Errorf("migrating skiplock's schema: %w", err)
//	}
//
// The migrations run in the first schema of the pool's search_path, which
// must exist, and keep their version in skiplock_schema_migrations
// ([Table]), so they never collide with an application's own
// golang-migrate table. [Version] reads the applied version, [Latest] is
// this build's; [Down] and [Steps] go back. The skiplock command runs the
// same code: `skiplock migrate up|down|status`.
//
// The files themselves ([FS]) are plain SQL that any tool can apply in
// order (golang-migrate's CLI, goose, psql); workers accept a schema
// another tool migrated, and Up then keeps out of it ([ErrOtherTool]
// unless it is current). [Grants] returns the GRANT statements of each
// kind of role ([RoleKind]: producer, worker, operator, observer).
//
// Runnable example, against a real database: ExampleUp.
//
// More in the repository: docs/SQL.md (the schema, other migration tools,
// upgrades), migrations/README.md (the conventions of the files),
// docs/OPERATIONS.md (database roles, upgrades).
package migrations
