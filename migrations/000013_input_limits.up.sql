-- Input limits of the SQL producers (skiplock_enqueue, skiplock_enqueue_task,
-- skiplock_enqueue_many), the same as queue.Client's, with errors that name
-- the limit and the size:
--
--   payload   1 MiB  of its jsonb text (payload::text)   skiplock.max_payload_bytes
--   metadata  64 KiB of its jsonb text                   skiplock.max_metadata_bytes
--   names     255 bytes (task and queue names)           fixed (queue.MaxNameLength)
--   keys      1024 bytes (unique, exclusive, sequence)   fixed (queue.MaxKeyLength)
--
-- The sizes are PostgreSQL settings, read at each call, so that they can be
-- changed the way any setting is: for the database or a role (ALTER
-- DATABASE app SET skiplock.max_payload_bytes = 4194304; a superuser, or a
-- role granted SET on the parameter), a session (SET, PGOPTIONS) or a
-- transaction (SET LOCAL). Unset or 0: the default; negative: no limit.
-- Like the Go client's option, the limit guards producers against their own
-- mistakes, not against a producer that sets it.
--
-- Over a limit raises SQLSTATE 22001 (string_data_right_truncation); other
-- bad input keeps 22023 (invalid_parameter_value).
--
-- The limits are checked by the functions, not by constraints of the table:
-- a CHECK would be read again at every update of a row (each claim, each
-- outcome), so that a task stored before the migration with an overlong key
-- could no longer run, and a size limit changed downwards would strand every
-- larger task already queued. The table keeps the checks it had (names of at
-- most 255 characters, sequence keys of at most 1024 bytes).

-- The limit in bytes that setting holds: fallback when unset, empty or 0,
-- NULL (none) when negative. A value that is not a whole number raises
-- 22023, naming the setting.
CREATE FUNCTION skiplock_input_limit(setting text, fallback bigint) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v text := btrim(coalesce(current_setting(setting, true), ''));
    n bigint;
BEGIN
    IF v = '' THEN
        RETURN fallback;
    END IF;
    IF v !~ '^-?[0-9]{1,18}$' THEN
        RAISE EXCEPTION 'skiplock: setting % is %, not a number of bytes (unset it for the default, %)',
            setting, quote_literal(v), fallback
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    n := v::bigint;
    IF n = 0 THEN
        RETURN fallback;
    END IF;
    RETURN CASE WHEN n < 0 THEN NULL ELSE n END;
END;
$$;

-- Refuses a value of size bytes over the limit (NULL: none), naming what it
-- is, the size, the limit and how to change it; 22001.
CREATE FUNCTION skiplock_check_size(what text, size bigint, size_limit bigint, how text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF size > size_limit THEN
        RAISE EXCEPTION 'skiplock: invalid task: % is % bytes, over the %-byte limit (%)',
            what, to_char(size, 'FM999,999,999,999,999'), to_char(size_limit, 'FM999,999,999,999,999'), how
            USING ERRCODE = 'string_data_right_truncation';
    END IF;
END;
$$;

-- Refuses an overlong text (22001, quoting its start: it may be huge), and
-- an empty or NULL one when required (22023).
CREATE FUNCTION skiplock_check_length(what text, value text, required boolean, max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF required AND value IS NULL THEN
        RAISE EXCEPTION 'skiplock: invalid task: % is NULL', what USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF required AND value = '' THEN
        RAISE EXCEPTION 'skiplock: invalid task: % is empty', what USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(value) > max_bytes THEN
        RAISE EXCEPTION 'skiplock: invalid task: % is % bytes, over the %-byte limit of %s: %...',
            what, to_char(octet_length(value), 'FM999,999,999,999,999'), to_char(max_bytes, 'FM999,999'),
            what, quote_literal(left(value, 40))
            USING ERRCODE = 'string_data_right_truncation';
    END IF;
END;
$$;

-- Migration 11's skiplock_enqueue_task with the limits. skiplock_enqueue
-- calls it unchanged.
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
    PERFORM skiplock_check_length('name', name, true, 255);
    PERFORM skiplock_check_length('queue name', queue, true, 255);
    PERFORM skiplock_check_length('unique key', unique_key, false, 1024);
    PERFORM skiplock_check_length('exclusive key', exclusive_key, false, 1024);
    PERFORM skiplock_check_length('sequence key', sequence_key, false, 1024);
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
    IF timeout IS NOT NULL AND timeout_ms < 1 THEN
        RAISE EXCEPTION 'skiplock: invalid task: timeout must be at least 1ms, got %', timeout
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

-- Migration 11's skiplock_enqueue_many, whose errors now keep 22001 for a
-- task over a limit, and let a bad setting (not a task's fault) through
-- as it is.
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
        EXCEPTION WHEN invalid_parameter_value OR string_data_right_truncation OR invalid_text_representation
                    OR invalid_datetime_format OR datetime_field_overflow OR numeric_value_out_of_range THEN
            IF SQLERRM LIKE 'skiplock: setting %' THEN
                RAISE;
            END IF;
            RAISE EXCEPTION 'skiplock: invalid task %: %', ord, regexp_replace(SQLERRM, '^skiplock: invalid task: ', '')
                USING ERRCODE = CASE SQLSTATE WHEN '22001' THEN '22001' ELSE '22023' END;
        END;
        RETURN NEXT;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 13';
