-- Sequences: tasks that share a sequence key run one at a time, in enqueue
-- (id) order, across every worker (queue.WithSequence).
--
-- A key's "blocking" tasks are its pending, running and waiting ones, and a
-- failed one that asked to hold the rest (sequence_hold). A task is enqueued
-- pending only when its key has no blocking task; otherwise 'waiting':
-- outside the claim's partial index (status = 'pending'), so a task that
-- waits its turn costs the claim nothing, and the claim is unchanged. When a
-- task leaves the blocking statuses (completed, cancelled, failed for good
-- without hold, deleted), the trigger below makes the key's lowest waiting
-- task pending, in the same transaction.
--
-- Producers of one key are serialized by a transaction-level advisory lock
-- on the key (skiplock_sequence_lock_key), taken before the check for
-- blocking tasks, which runs in a later statement so that its snapshot sees
-- whatever the previous holder committed. Everything else that makes a task
-- of a key pending (the release, a requeue) only tries the lock: an outcome
-- write never waits on a producer's open transaction. A release that finds
-- the lock taken is left to the rescuer's pass (SequenceReleaseStalled),
-- which releases every key whose waiting tasks have nothing ahead of them.
--
-- Both new columns are NULL on tasks without a sequence, and no BEFORE
-- trigger is added: COPY keeps its multi-row inserts for plain batches.
ALTER TABLE skiplock_tasks
    ADD COLUMN sequence_key  text,
    -- true: a task of the key that fails for good keeps the rest waiting
    -- until it is requeued or cancelled. NULL (the default) lets them go.
    ADD COLUMN sequence_hold boolean,
    -- NOT VALID: the column is new and NULL in every row, and checking them
    -- would scan the table under this file's exclusive lock on it. Every
    -- new row version is checked.
    ADD CONSTRAINT skiplock_tasks_sequence_key_check
        CHECK (sequence_key IS NULL OR (sequence_key <> '' AND octet_length(sequence_key) <= 1024)) NOT VALID;

-- A key's tasks in order, whatever their status (`skiplock sequence show`).
-- skiplock:concurrently
CREATE INDEX skiplock_tasks_sequence_idx
    ON skiplock_tasks (sequence_key, id)
    WHERE sequence_key IS NOT NULL;

-- The checks of enqueue, release and requeue read two small indexes, so
-- that each is a probe or two however many of a key's tasks wait or have
-- finished: a key's head (pending, running, or failed and holding; one
-- entry in a healthy sequence), and its waiting tasks in order.
-- skiplock:concurrently
CREATE INDEX skiplock_tasks_sequence_head_idx
    ON skiplock_tasks (sequence_key)
    WHERE sequence_key IS NOT NULL
      AND (status IN ('pending', 'running') OR (status = 'failed' AND sequence_hold));
-- skiplock:concurrently
CREATE INDEX skiplock_tasks_sequence_waiting_idx
    ON skiplock_tasks (sequence_key, id)
    WHERE sequence_key IS NOT NULL AND status = 'waiting';

-- The functions below compare sequence_key with their key argument under
-- the column's collation, written out (COLLATE "default"): a plpgsql
-- function's text arguments take the collation of its call, and a call
-- whose arguments mix in a name (TG_TABLE_SCHEMA is collated "C") would
-- otherwise compare under "C", which no index of the column serves: each
-- release would read the whole table.

-- The advisory lock of a key: the bigint key space, hashed with a seed made
-- of the table's OID (so that two skiplock schemas do not share locks) and
-- 1 in the high half (so that it differs from an exclusive key's lock,
-- which hashes with the OID alone).
CREATE FUNCTION skiplock_sequence_lock_key(key text) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT hashtextextended(key, (1::bigint << 32) | 'skiplock_tasks'::regclass::oid::bigint) $$;

-- For producers: locks the keys (each once, in lock-key order, so that two
-- producers of the same keys cannot deadlock), waiting for producers of
-- them whose transactions are open, then returns the keys that have a
-- blocking task: a new task of one of them must wait. Each statement of a
-- VOLATILE function takes a new snapshot under READ COMMITTED, so the
-- check sees what a producer committed while this one waited for its lock.
-- Under REPEATABLE READ or SERIALIZABLE it would not: refused.
CREATE FUNCTION skiplock_sequence_enter(keys text[]) RETURNS text[]
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    k text;
    busy text[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'skiplock: sequence keys need a READ COMMITTED transaction, not %',
            upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'feature_not_supported';
    END IF;
    FOR k IN
        SELECT d.key
        FROM (SELECT DISTINCT s.key FROM unnest(keys) AS s(key) WHERE s.key IS NOT NULL AND s.key <> '') AS d
        ORDER BY skiplock_sequence_lock_key(d.key)
    LOOP
        PERFORM pg_advisory_xact_lock(skiplock_sequence_lock_key(k));
    END LOOP;
    SELECT coalesce(array_agg(s.key), '{}') INTO busy
    FROM (SELECT DISTINCT u.key FROM unnest(keys) AS u(key)) AS s
    WHERE EXISTS (
              SELECT 1 FROM skiplock_tasks AS h
              WHERE h.sequence_key = s.key COLLATE "default"
                AND (h.status IN ('pending', 'running') OR (h.status = 'failed' AND h.sequence_hold)))
       OR EXISTS (
              SELECT 1 FROM skiplock_tasks AS w
              WHERE w.sequence_key = s.key COLLATE "default" AND w.status = 'waiting');
    RETURN busy;
END;
$$;

-- For a requeue: whether the task may be pending now, that is whether it
-- would be its key's head: no other task of the key pending, running or
-- failed and holding, none waiting ahead of it, and none ahead of it among
-- the tasks requeued with it (requeued: the statement's tasks, so that the
-- first of a key goes first whatever order the statement updates them in).
-- false (wait; the rescuer's pass releases it in turn) also when a producer
-- of the key holds the lock, or outside READ COMMITTED. A VOLATILE function
-- sees the rows its calling statement has changed so far: of two tasks of a
-- key requeued by one statement, the second sees the first.
CREATE FUNCTION skiplock_sequence_admits(key text, task_id bigint, requeued bigint[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed'
       OR NOT pg_try_advisory_xact_lock(skiplock_sequence_lock_key(key)) THEN
        RETURN false;
    END IF;
    RETURN NOT EXISTS (
        SELECT 1 FROM skiplock_tasks AS h
        WHERE h.sequence_key = key COLLATE "default"
          AND (h.status IN ('pending', 'running') OR (h.status = 'failed' AND h.sequence_hold))
          AND h.id <> task_id)
    AND NOT EXISTS (
        SELECT 1 FROM skiplock_tasks AS w
        WHERE w.sequence_key = key COLLATE "default" AND w.status = 'waiting' AND w.id < task_id)
    AND NOT EXISTS (
        SELECT 1 FROM skiplock_tasks AS r
        WHERE r.id = ANY(requeued) AND r.id < task_id AND r.sequence_key = key COLLATE "default");
END;
$$;

-- Makes the key's lowest waiting task pending (due at once, or at its own
-- later run_at) if no task of the key is pending, running or failed and
-- holding, wakes its queue's workers on channel, and returns its id; NULL
-- when nothing was released, or when a producer of the key holds the lock
-- (the rescuer's pass comes back to it), or outside READ COMMITTED.
CREATE FUNCTION skiplock_sequence_release(key text, channel text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    released_id bigint;
    released_queue text;
    due boolean;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed'
       OR NOT pg_try_advisory_xact_lock(skiplock_sequence_lock_key(key)) THEN
        RETURN NULL;
    END IF;
    UPDATE skiplock_tasks AS t
    SET status = 'pending',
        run_at = greatest(t.run_at, now())
    WHERE t.id = (SELECT w.id FROM skiplock_tasks AS w
                  WHERE w.sequence_key = key COLLATE "default" AND w.status = 'waiting'
                  ORDER BY w.id LIMIT 1)
      AND t.status = 'waiting'
      AND NOT EXISTS (
          SELECT 1 FROM skiplock_tasks AS h
          WHERE h.sequence_key = key COLLATE "default"
            AND (h.status IN ('pending', 'running') OR (h.status = 'failed' AND h.sequence_hold)))
    RETURNING t.id, t.queue, t.run_at <= now() INTO released_id, released_queue, due;
    IF due THEN
        PERFORM pg_notify(channel, released_queue);
    END IF;
    RETURN released_id;
END;
$$;

-- Moves a sequence on when one of its tasks stops blocking it, in the
-- transaction of that change, whoever makes it: a worker's outcome write,
-- the rescuer (out of attempts), an operator's cancel or delete, retention.
-- A retry (back to pending) or a rescue keeps the task at the head.
CREATE FUNCTION skiplock_sequence_advance() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM skiplock_sequence_release(OLD.sequence_key, left('skiplock_' || TG_TABLE_SCHEMA, 63) COLLATE "default");
    ELSE
        PERFORM skiplock_sequence_release(NEW.sequence_key, left('skiplock_' || TG_TABLE_SCHEMA, 63) COLLATE "default");
    END IF;
    RETURN NULL;
END;
$$;

-- The WHEN clauses keep these off every task without a sequence, and off
-- changes that leave the task blocking (a claim, a retry, a rescue).
CREATE TRIGGER skiplock_tasks_sequence_update
    AFTER UPDATE OF status ON skiplock_tasks
    FOR EACH ROW
    WHEN (NEW.sequence_key IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
          AND (NEW.status IN ('completed', 'cancelled') OR (NEW.status = 'failed' AND NEW.sequence_hold IS NOT TRUE)))
    EXECUTE FUNCTION skiplock_sequence_advance();

CREATE TRIGGER skiplock_tasks_sequence_delete
    AFTER DELETE ON skiplock_tasks
    FOR EACH ROW
    WHEN (OLD.sequence_key IS NOT NULL
          AND (OLD.status IN ('pending', 'running', 'waiting') OR (OLD.status = 'failed' AND OLD.sequence_hold)))
    EXECUTE FUNCTION skiplock_sequence_advance();

-- The SQL producers of migration 6 take a sequence key too: new trailing
-- parameters, so every call written for migration 6 works unchanged. A new
-- signature needs DROP and CREATE; skiplock_enqueue_many keeps its own.
DROP FUNCTION skiplock_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb);
DROP FUNCTION skiplock_enqueue_task(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb);

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
    metadata      jsonb       DEFAULT '{}',
    sequence_key  text        DEFAULT NULL,
    sequence_hold boolean     DEFAULT false
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    SELECT * INTO r FROM skiplock_enqueue_task(name, payload, queue, run_at, priority, max_attempts, timeout,
                                               unique_key, exclusive_key, metadata, sequence_key, sequence_hold);
    IF r.duplicate THEN
        RAISE NOTICE 'skiplock: duplicate task: unique key % is held by task %', unique_key, r.id;
    END IF;
    RETURN r.id;
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

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 11';
