-- Back to migration 10: the SQL producers of migration 6 as they were, and
-- no sequences. Tasks waiting their turn in a sequence would have nothing
-- left to release them: they become pending, due at their run_at, so no
-- work is lost (the order and one-at-a-time of their keys go with the
-- feature).
DROP TRIGGER IF EXISTS skiplock_tasks_sequence_delete ON skiplock_tasks;
DROP TRIGGER IF EXISTS skiplock_tasks_sequence_update ON skiplock_tasks;
DROP FUNCTION IF EXISTS skiplock_sequence_advance();
DROP FUNCTION IF EXISTS skiplock_sequence_release(text, text);
DROP FUNCTION IF EXISTS skiplock_sequence_admits(text, bigint, bigint[]);

UPDATE skiplock_tasks SET status = 'pending' WHERE status = 'waiting' AND sequence_key IS NOT NULL;

DROP FUNCTION IF EXISTS skiplock_enqueue_many(jsonb);
DROP FUNCTION IF EXISTS skiplock_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb, text, boolean);
DROP FUNCTION IF EXISTS skiplock_enqueue_task(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb, text, boolean);
DROP FUNCTION IF EXISTS skiplock_sequence_enter(text[]);
DROP FUNCTION IF EXISTS skiplock_sequence_lock_key(text);

DROP INDEX IF EXISTS skiplock_tasks_sequence_waiting_idx;
DROP INDEX IF EXISTS skiplock_tasks_sequence_head_idx;
DROP INDEX IF EXISTS skiplock_tasks_sequence_idx;
ALTER TABLE skiplock_tasks
    DROP CONSTRAINT IF EXISTS skiplock_tasks_sequence_key_check,
    DROP COLUMN IF EXISTS sequence_hold,
    DROP COLUMN IF EXISTS sequence_key;

-- Migration 6's producers, exactly.
-- skiplock_enqueue_task inserts one task with the checks of queue.Enqueue;
-- the insert trigger wakes idle workers at commit. A task whose unique key
-- is held by a pending or running task is not inserted: it returns the
-- holder's id and duplicate = true (queue.Enqueue's DuplicateError). Bad
-- input raises SQLSTATE 22023 with a message naming the field, and inserts
-- nothing.
CREATE FUNCTION skiplock_enqueue_task(
    name          text,
    payload       jsonb       DEFAULT 'null',
    queue         text        DEFAULT 'default',
    run_at        timestamptz DEFAULT NULL,
    priority      integer     DEFAULT 0,
    max_attempts  integer     DEFAULT 25,
    timeout       interval    DEFAULT NULL,
    unique_key    text        DEFAULT NULL,
    exclusive_key text        DEFAULT NULL,
    metadata      jsonb       DEFAULT '{}'
) RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
DECLARE
    new_id bigint;
    timeout_ms bigint := (extract(epoch FROM timeout) * 1000)::bigint;
BEGIN
    IF name IS NULL OR octet_length(name) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'skiplock: invalid task: name must be 1 to 255 bytes, got %', quote_nullable(name)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF queue IS NULL OR octet_length(queue) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'skiplock: invalid task: queue name must be 1 to 255 bytes, got %', quote_nullable(queue)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF priority IS NULL OR priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'skiplock: invalid task: priority % is outside -32768..32767', coalesce(priority::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 THEN
        RAISE EXCEPTION 'skiplock: invalid task: max attempts must be at least 1, got %', coalesce(max_attempts::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF timeout IS NOT NULL AND timeout_ms < 1 THEN
        RAISE EXCEPTION 'skiplock: invalid task: timeout must be at least 1ms, got %', timeout
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(unique_key) > 1024 OR octet_length(exclusive_key) > 1024 THEN
        RAISE EXCEPTION 'skiplock: invalid task: unique and exclusive keys must be at most 1024 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: invalid task: metadata must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- As in Go: an empty key is no key; a NULL payload is JSON null.
    unique_key := nullif(unique_key, '');
    exclusive_key := nullif(exclusive_key, '');
    -- The holder of a unique key may finish between the conflict and the
    -- look-up: then try again.
    FOR attempt IN 1..10 LOOP
        INSERT INTO skiplock_tasks AS t (queue, name, payload, metadata, priority, run_at, max_attempts,
                                         timeout_ms, unique_key, exclusive_key)
        VALUES (skiplock_enqueue_task.queue, skiplock_enqueue_task.name, coalesce(skiplock_enqueue_task.payload, 'null'),
                skiplock_enqueue_task.metadata, skiplock_enqueue_task.priority, coalesce(skiplock_enqueue_task.run_at, now()),
                skiplock_enqueue_task.max_attempts, timeout_ms, unique_key, exclusive_key)
        ON CONFLICT DO NOTHING
        RETURNING t.id INTO new_id;
        IF new_id IS NOT NULL THEN
            RETURN QUERY SELECT new_id, false;
            RETURN;
        END IF;
        SELECT t.id INTO new_id FROM skiplock_tasks AS t
        WHERE t.unique_key = skiplock_enqueue_task.unique_key AND t.status IN ('pending', 'running');
        IF new_id IS NOT NULL THEN
            RETURN QUERY SELECT new_id, true;
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'skiplock: unique key % kept changing hands; try again', unique_key
        USING ERRCODE = 'serialization_failure';
END;
$$;

-- skiplock_enqueue is skiplock_enqueue_task returning the id alone: a
-- duplicate returns the holder's id, with a NOTICE.
CREATE FUNCTION skiplock_enqueue(
    name          text,
    payload       jsonb       DEFAULT 'null',
    queue         text        DEFAULT 'default',
    run_at        timestamptz DEFAULT NULL,
    priority      integer     DEFAULT 0,
    max_attempts  integer     DEFAULT 25,
    timeout       interval    DEFAULT NULL,
    unique_key    text        DEFAULT NULL,
    exclusive_key text        DEFAULT NULL,
    metadata      jsonb       DEFAULT '{}'
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    SELECT * INTO r FROM skiplock_enqueue_task(name, payload, queue, run_at, priority, max_attempts, timeout,
                                               unique_key, exclusive_key, metadata);
    IF r.duplicate THEN
        RAISE NOTICE 'skiplock: duplicate task: unique key % is held by task %', unique_key, r.id;
    END IF;
    RETURN r.id;
END;
$$;

-- skiplock_enqueue_many inserts a JSON array of tasks, each an object with
-- skiplock_enqueue's parameters as keys ("name" required), in one
-- transaction: one bad task raises and inserts none. It returns a row per
-- task, in input order: its position (from 1), its id, and whether it was
-- a duplicate of a pending or running task (id is then the holder's).
CREATE FUNCTION skiplock_enqueue_many(tasks jsonb)
RETURNS TABLE (ord bigint, id bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
DECLARE
    task jsonb;
    unknown text;
    r record;
BEGIN
    IF jsonb_typeof(tasks) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'skiplock: invalid task: skiplock_enqueue_many takes a JSON array of task objects'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    ord := 0;
    FOR task IN SELECT value FROM jsonb_array_elements(tasks) LOOP
        ord := ord + 1;
        IF jsonb_typeof(task) <> 'object' THEN
            RAISE EXCEPTION 'skiplock: invalid task %: not a JSON object', ord USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT k INTO unknown FROM jsonb_object_keys(task) AS k
        WHERE k NOT IN ('name', 'payload', 'queue', 'run_at', 'priority', 'max_attempts', 'timeout',
                        'unique_key', 'exclusive_key', 'metadata')
        LIMIT 1;
        IF unknown IS NOT NULL THEN
            RAISE EXCEPTION 'skiplock: invalid task %: unknown key %', ord, quote_literal(unknown)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        BEGIN
            SELECT * INTO r FROM skiplock_enqueue_task(
                name          => task->>'name',
                payload       => coalesce(task->'payload', 'null'),
                queue         => coalesce(task->>'queue', 'default'),
                run_at        => (task->>'run_at')::timestamptz,
                priority      => coalesce((task->>'priority')::integer, 0),
                max_attempts  => coalesce((task->>'max_attempts')::integer, 25),
                timeout       => (task->>'timeout')::interval,
                unique_key    => task->>'unique_key',
                exclusive_key => task->>'exclusive_key',
                metadata      => coalesce(task->'metadata', '{}'));
            id := r.id;
            duplicate := r.duplicate;
        EXCEPTION WHEN invalid_parameter_value OR invalid_text_representation OR invalid_datetime_format
                    OR datetime_field_overflow OR numeric_value_out_of_range THEN
            RAISE EXCEPTION 'skiplock: invalid task %: %', ord, regexp_replace(SQLERRM, '^skiplock: invalid task: ', '')
                USING ERRCODE = 'invalid_parameter_value';
        END;
        RETURN NEXT;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 10';
