-- name: SchemaTaskTable :one
-- Resolves skiplock_tasks through search_path: its OID is the advisory lock
-- class, its schema names the NOTIFY channel. No row: not migrated.
SELECT c.oid::bigint AS oid, n.nspname::text AS schema
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('skiplock_tasks');

-- name: SchemaSearchPath :one
-- Whether any schema of the search_path exists (current_schema() is NULL
-- when none does: nowhere to find or create tables), the search_path as
-- set, and the user that "$user" in it stands for.
SELECT (current_schema() IS NOT NULL)::boolean AS schema_exists,
       current_setting('search_path')::text AS search_path,
       current_user::text AS user_name;

-- name: SchemaVersionSources :one
-- Where the schema's version can be read: skiplock_schema_version(), which
-- every migration from 6 on defines, whichever tool applied it; and
-- skiplock_schema_migrations, kept by skiplock's own runner (with its dirty
-- flag), the only source for a schema older than 6.
SELECT (to_regprocedure('skiplock_schema_version()') IS NOT NULL)::boolean AS has_function,
       (to_regclass('skiplock_schema_migrations') IS NOT NULL)::boolean AS has_table;

-- name: SchemaVersionStamp :one
SELECT skiplock_schema_version()::bigint AS version;

-- name: SchemaVersion :one
SELECT version, dirty FROM skiplock_schema_migrations LIMIT 1;

-- name: SessionBackendPID :one
SELECT pg_backend_pid()::integer AS pid;

-- name: SchemaLockTableSize :one
-- The shared lock table's size, which every session's advisory locks share:
-- max_locks_per_transaction × (max_connections + max_prepared_transactions).
SELECT (current_setting('max_locks_per_transaction')::bigint
        * (current_setting('max_connections')::bigint + current_setting('max_prepared_transactions')::bigint))::bigint AS entries;

-- name: SessionReadOnly :one
-- A standby, or a primary that pg_auto_failover keeps read-only until its
-- old peer is known demoted, answers reads but refuses every write.
SELECT current_setting('transaction_read_only') = 'on' AS read_only;

-- name: SchemaUsable :one
-- Whether a schema exists and whether this role may use it: PostgreSQL
-- leaves a schema the role has no USAGE on out of its search_path, as if
-- it did not exist.
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace AS n WHERE n.nspname = @name::text)::boolean AS schema_exists,
       coalesce((SELECT pg_catalog.has_schema_privilege(n.oid, 'USAGE')
                 FROM pg_catalog.pg_namespace AS n WHERE n.nspname = @name::text), false)::boolean AS usable;

-- name: SchemaIndexState :one
-- An index that migrations.Up builds concurrently, after its migration:
-- whether it exists, whether it is valid (a build that was interrupted
-- leaves an invalid index behind), and the size in bytes of the table it
-- is on (small tables get a plain build, which takes no time).
SELECT (to_regclass(@index_name::text) IS NOT NULL)::boolean AS index_exists,
       coalesce((SELECT i.indisvalid FROM pg_catalog.pg_index AS i
                 WHERE i.indexrelid = to_regclass(@index_name::text)), false)::boolean AS index_valid,
       coalesce(pg_catalog.pg_relation_size(to_regclass(@table_name::text)), 0)::bigint AS table_bytes;
