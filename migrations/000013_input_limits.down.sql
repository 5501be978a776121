-- Back to migration 11: its SQL producers, exactly, without the size limits
-- (and with its messages for overlong names and keys).
CREATE OR REPLACE FUNCTION skiplock_enqueue_task(
    name          text,
    payload       jsonb       DEFAULT 'null',
    queue         text        DEFAULT 'default',
    run_at        timestamptz DEFAULT NULL,
    priority      integer     DEFAULT 0,
    max_attempts  integer     DEFAULT 25,
    timeout       interval    DEFAULT NULL,
    unique_key    text        DEFAULT NULL,
    exclusive_key text        DEFAULT NULL,
    metadata      jsonb       DEFAULT '{}',
    sequence_key  text        DEFAULT NULL,
    sequence_hold boolean     DEFAULT false
) RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
DECLARE
    new_id bigint;
    timeout_ms bigint := (extract(epoch FROM timeout) * 1000)::bigint;
    new_status text := 'pending';
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
    IF octet_length(sequence_key) > 1024 THEN
        RAISE EXCEPTION 'skiplock: invalid task: sequence key must be at most 1024 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'skiplock: invalid task: metadata must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- As in Go: an empty key is no key; a NULL payload is JSON null.
    unique_key := nullif(unique_key, '');
    exclusive_key := nullif(exclusive_key, '');
    sequence_key := nullif(sequence_key, '');
    IF coalesce(sequence_hold, false) AND sequence_key IS NULL THEN
        RAISE EXCEPTION 'skiplock: invalid task: sequence_hold needs a sequence_key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sequence_key IS NOT NULL AND unique_key IS NOT NULL THEN
        -- A waiting task does not hold a unique key (the index covers
        -- pending and running tasks): its release could collide.
        RAISE EXCEPTION 'skiplock: invalid task: sequence_key cannot be combined with unique_key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sequence_key IS NOT NULL AND cardinality(skiplock_sequence_enter(ARRAY[sequence_key])) > 0 THEN
        new_status := 'waiting';
    END IF;
    -- The holder of a unique key may finish between the conflict and the
    -- look-up: then try again.
    FOR attempt IN 1..10 LOOP
        INSERT INTO skiplock_tasks AS t (queue, name, payload, metadata, priority, run_at, max_attempts,
                                         timeout_ms, unique_key, exclusive_key, sequence_key, sequence_hold, status)
        VALUES (skiplock_enqueue_task.queue, skiplock_enqueue_task.name, coalesce(skiplock_enqueue_task.payload, 'null'),
                skiplock_enqueue_task.metadata, skiplock_enqueue_task.priority, coalesce(skiplock_enqueue_task.run_at, now()),
                skiplock_enqueue_task.max_attempts, timeout_ms, unique_key, exclusive_key,
                sequence_key, CASE WHEN sequence_key IS NOT NULL AND skiplock_enqueue_task.sequence_hold THEN true END,
                new_status)
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

CREATE OR REPLACE FUNCTION skiplock_enqueue_many(tasks jsonb)
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
                        'unique_key', 'exclusive_key', 'metadata', 'sequence_key', 'sequence_hold')
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
                metadata      => coalesce(task->'metadata', '{}'),
                sequence_key  => task->>'sequence_key',
                sequence_hold => coalesce((task->>'sequence_hold')::boolean, false));
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

DROP FUNCTION IF EXISTS skiplock_check_length(text, text, boolean, integer);
DROP FUNCTION IF EXISTS skiplock_check_size(text, bigint, bigint, text);
DROP FUNCTION IF EXISTS skiplock_input_limit(text, bigint);

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 12';
