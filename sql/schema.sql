-- name: SchemaTaskTable :one
-- Resolves skiplock_tasks through search_path: its OID is the advisory lock
-- class, its schema names the NOTIFY channel. No row: not migrated.
SELECT c.oid::bigint AS oid, n.nspname::text AS schema
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('skiplock_tasks');

-- name: SchemaVersion :one
SELECT version, dirty FROM skiplock_schema_migrations LIMIT 1;

-- name: SessionBackendPID :one
SELECT pg_backend_pid()::integer AS pid;

-- name: SchemaLockTableSize :one
-- The shared lock table's size, which every session's advisory locks share:
-- max_locks_per_transaction × (max_connections + max_prepared_transactions).
SELECT (current_setting('max_locks_per_transaction')::bigint
        * (current_setting('max_connections')::bigint + current_setting('max_prepared_transactions')::bigint))::bigint AS entries;
