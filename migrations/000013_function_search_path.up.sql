-- Every skiplock function runs with its caller's privileges (SECURITY
-- INVOKER, PostgreSQL's default; none is SECURITY DEFINER): a producer
-- that calls skiplock_enqueue needs INSERT on skiplock_tasks itself, and a
-- trigger works with the rights of whoever changed the row. From here on
-- each also resolves names in the schema it lives in, whatever the
-- caller's search_path: a producer may call jobs.skiplock_enqueue(...)
-- with search_path=public, an application may update jobs.skiplock_tasks
-- with no skiplock schema in its path, and an object of the same name in a
-- schema earlier in the caller's path (one that other roles can create
-- objects in) cannot stand in for skiplock's. pg_catalog is searched first
-- (implicitly), pg_temp last, as PostgreSQL's documentation advises.
--
-- The schema is written out (not FROM CURRENT, which would keep whatever
-- the migrating session's search_path was, "$user" included).
--
-- skiplock_schema_version() is left alone: its body is a constant that
-- names nothing, and every migration redefines it (CREATE OR REPLACE
-- resets a function's SET clauses).
--
-- A function created or replaced by a later migration must set the same
-- pin itself (see README.md in this folder); a test checks every function.
DO $$
DECLARE
    pin text := format('SET search_path = %I, pg_temp', current_schema());
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'skiplock_notify_insert()',
        'skiplock_enqueue_task(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb, text, boolean)',
        'skiplock_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb, text, boolean)',
        'skiplock_enqueue_many(jsonb)',
        'skiplock_workflow_advance()',
        'skiplock_sequence_lock_key(text)',
        'skiplock_sequence_enter(text[])',
        'skiplock_sequence_admits(text, bigint, bigint[])',
        'skiplock_sequence_release(text, text)',
        'skiplock_sequence_advance()'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s %s', f, pin);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 13';
