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
-- Three functions are left alone, where a pin would buy nothing and cost
-- something (measured: docs/OPERATIONS.md, "Database roles"):
-- skiplock_schema_version(), a constant that every migration redefines
-- (CREATE OR REPLACE resets a function's SET clauses);
-- skiplock_notify_insert(), the insert trigger, which names no skiplock
-- object (it reads its transition table and calls pg_catalog's
-- functions) and fires on every INSERT and COPY of tasks (pinned, it cost
-- about 6% of the rate of single-task enqueues); and
-- skiplock_sequence_lock_key, a one-line SQL function that PostgreSQL
-- inlines into its callers, all of them pinned, so that it resolves
-- skiplock_tasks in their schema (a SET clause stops the inlining: 2.7 us
-- a call instead of 0.4).
--
-- A function created or replaced by a later migration must set the same
-- pin itself (see README.md in this folder); a test checks every function.
DO $$
DECLARE
    pin text := format('SET search_path = %I, pg_temp', current_schema());
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'skiplock_enqueue_task(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb, text, boolean)',
        'skiplock_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb, text, boolean)',
        'skiplock_enqueue_many(jsonb)',
        'skiplock_workflow_advance()',
        'skiplock_sequence_enter(text[])',
        'skiplock_sequence_admits(text, bigint, bigint[])',
        'skiplock_sequence_release(text, text)',
        'skiplock_sequence_advance()',
        'skiplock_input_limit(text, bigint)',
        'skiplock_check_size(text, bigint, bigint, text)',
        'skiplock_check_length(text, text, boolean, integer)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s %s', f, pin);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 14';
