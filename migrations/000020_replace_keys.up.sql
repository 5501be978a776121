-- Replace keys (queue.WithReplaceKey, queue.WithDebounce,
-- skiplock_enqueue_replace): while a task with the key has not started,
-- enqueueing another with the key replaces the waiting task's contents
-- (payload, run time, ...) instead of adding a task.
--
-- "Not started" is pending, never claimed (started_at NULL) and with an
-- empty history (errors '[]'): a task claimed once and back to pending (a
-- retry, a rescue, a task handed back at shutdown) has a started_at, and a
-- requeued one a history entry, so none of them can ever collide with a
-- task that took the key meanwhile. The index holds at most one task per
-- key in that state; its predicate starts with the key, NULL for plain
-- tasks, so a plain task's insert or claim stops at the first test.
--
-- Plain tasks pay nothing else: the column is NULL (a bit of the row's
-- null bitmap, no rewrite to add it) and neither the claim nor the outcome
-- write reads it. No update that was HOT stays out of reach of HOT
-- because of the index: besides the key it reads status (already in the
-- claim index's predicate), and started_at and errors, which change only
-- with status.
ALTER TABLE skiplock_tasks ADD COLUMN replace_key text;

-- skiplock:concurrently
CREATE UNIQUE INDEX skiplock_tasks_replace_key_idx
    ON skiplock_tasks (replace_key)
    WHERE replace_key IS NOT NULL AND status = 'pending' AND started_at IS NULL AND errors = '[]'::jsonb;

-- Enqueues a task with a replace key: if a task with the key has not
-- started, it becomes this one (name, payload, queue, run time, priority,
-- attempts, timeout, exclusive key, metadata; it keeps its id and
-- created_at), otherwise a new task is inserted. debounce sets the run
-- time to now() + debounce (it cannot be combined with run_at). Returns
-- the task's id and whether it replaced one.
--
-- The UPDATE only touches a row that is still unstarted on its latest
-- version: a worker claiming it at the same instant either locked it first
-- (the UPDATE waits, finds it running, and a new task is inserted) or
-- skips it (SKIP LOCKED) and claims it later with the new contents. Two
-- producers of one key that both find nothing to replace both insert; the
-- unique index lets one through and the other tries again, finding it.
CREATE FUNCTION skiplock_enqueue_replace(
    name          text,
    payload       jsonb       DEFAULT 'null',
    replace_key   text        DEFAULT NULL,
    debounce      interval    DEFAULT NULL,
    queue         text        DEFAULT 'default',
    run_at        timestamptz DEFAULT NULL,
    priority      integer     DEFAULT 0,
    max_attempts  integer     DEFAULT 25,
    timeout       interval    DEFAULT NULL,
    exclusive_key text        DEFAULT NULL,
    metadata      jsonb       DEFAULT '{}'
) RETURNS TABLE (id bigint, replaced boolean)
LANGUAGE plpgsql AS $$
DECLARE
    new_timeout_ms bigint := (extract(epoch FROM timeout) * 1000)::bigint;
    due timestamptz;
    hit_id bigint;
    hit_queue text;
    channel text;
BEGIN
    PERFORM skiplock_check_length('name', name, true, 255);
    PERFORM skiplock_check_length('queue name', queue, true, 255);
    PERFORM skiplock_check_length('replace key', replace_key, true, 1024);
    PERFORM skiplock_check_length('exclusive key', exclusive_key, false, 1024);
    PERFORM skiplock_check_size('payload', octet_length(payload::text),
        skiplock_input_limit('skiplock.max_payload_bytes', 1048576), 'skiplock.max_payload_bytes');
    IF metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: invalid task: metadata must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM skiplock_check_size('metadata', octet_length(metadata::text),
        skiplock_input_limit('skiplock.max_metadata_bytes', 65536), 'skiplock.max_metadata_bytes');
    IF priority IS NULL OR priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'skiplock: invalid task: priority % is outside -32768..32767', coalesce(priority::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 THEN
        RAISE EXCEPTION 'skiplock: invalid task: max attempts must be at least 1, got %', coalesce(max_attempts::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF timeout IS NOT NULL AND new_timeout_ms < 1 THEN
        RAISE EXCEPTION 'skiplock: invalid task: timeout must be at least 1ms, got %', timeout
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF debounce < interval '0' THEN
        RAISE EXCEPTION 'skiplock: invalid task: debounce must not be negative, got %', debounce
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF debounce IS NOT NULL AND run_at IS NOT NULL THEN
        RAISE EXCEPTION 'skiplock: invalid task: debounce sets the run time; it cannot be combined with run_at'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    exclusive_key := nullif(exclusive_key, '');
    payload := coalesce(payload, 'null');
    due := coalesce(skiplock_enqueue_replace.run_at, now() + debounce, now());
    FOR attempt IN 1..100 LOOP
        UPDATE skiplock_tasks AS t
        SET queue = skiplock_enqueue_replace.queue, name = skiplock_enqueue_replace.name,
            payload = skiplock_enqueue_replace.payload, metadata = skiplock_enqueue_replace.metadata,
            priority = skiplock_enqueue_replace.priority, run_at = due,
            max_attempts = skiplock_enqueue_replace.max_attempts, timeout_ms = new_timeout_ms,
            exclusive_key = skiplock_enqueue_replace.exclusive_key
        WHERE t.replace_key = skiplock_enqueue_replace.replace_key
          AND t.status = 'pending' AND t.started_at IS NULL AND t.errors = '[]'::jsonb
        RETURNING t.id, t.queue INTO hit_id, hit_queue;
        IF hit_id IS NOT NULL THEN
            IF due <= now() THEN
                -- An UPDATE fires no insert trigger: wake the queue's
                -- idle workers (at commit), as an insert would.
                SELECT left('skiplock_' || n.nspname, 63) INTO channel
                FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                WHERE c.oid = 'skiplock_tasks'::regclass;
                PERFORM pg_notify(channel, hit_queue);
            END IF;
            RETURN QUERY SELECT hit_id, true;
            RETURN;
        END IF;
        INSERT INTO skiplock_tasks AS t (queue, name, payload, metadata, priority, run_at, max_attempts,
                                         timeout_ms, exclusive_key, replace_key)
        VALUES (skiplock_enqueue_replace.queue, skiplock_enqueue_replace.name, skiplock_enqueue_replace.payload,
                skiplock_enqueue_replace.metadata, skiplock_enqueue_replace.priority, due,
                skiplock_enqueue_replace.max_attempts, new_timeout_ms, skiplock_enqueue_replace.exclusive_key,
                skiplock_enqueue_replace.replace_key)
        ON CONFLICT DO NOTHING
        RETURNING t.id INTO hit_id;
        IF hit_id IS NOT NULL THEN
            RETURN QUERY SELECT hit_id, false;
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'skiplock: replace key % kept changing hands; try again', replace_key
        USING ERRCODE = 'serialization_failure';
END;
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION skiplock_enqueue_replace(text, jsonb, text, interval, text, timestamptz, integer, integer, interval, text, jsonb) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 20';
