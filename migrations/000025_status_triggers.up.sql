-- The three AFTER UPDATE OF status triggers of workflows, sequences and
-- batches test only their own column and that the change is not a claim
-- (pending to running) in their WHEN clauses; each function tests the rest
-- of its old condition first and returns when its feature has nothing to
-- do. PostgreSQL prepares a trigger's WHEN clause again in every statement
-- that sets status, however many rows it changes: the three full clauses
-- made each claim and each outcome write of a plain task, which none of
-- them concerns, cost 50-70 us more of server CPU (a 1-row UPDATE of
-- status on a copy of the table: 57 us with no trigger, 107-127 with the
-- three full clauses, 84-88 with these; 2 vCPU AMD EPYC, PostgreSQL 15).
-- That is most of what a hand-off's claim and outcome write cost beyond
-- their rows, and of a task's server CPU at low rates. A status change
-- that a clause now lets through and the function turns away (a retry, a
-- workflow's own cascade) costs its row a call, about 2.6 us.
--
-- The functions are the ones of migrations 9, 11 and 18, with that test
-- added; the DELETE triggers are unchanged. Expand only: workers of the
-- previous release see the same outcomes.

CREATE OR REPLACE FUNCTION skiplock_workflow_advance() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    channel text := left('skiplock_' || TG_TABLE_SCHEMA, 63);
    q text;
    cause skiplock_tasks;
    how text;
    changed bigint[];
BEGIN
    -- The trigger's WHEN tests the column and the transition only;
    -- an update that moves nothing on returns here.
    IF TG_OP = 'UPDATE' THEN
        IF NOT (OLD.status IS DISTINCT FROM NEW.status
                AND (NEW.status IN ('completed', 'failed', 'cancelled') OR OLD.status IN ('failed', 'cancelled'))
                -- 0 in a WHEN clause: this function runs one trigger deeper
                AND pg_trigger_depth() = 1) THEN
            RETURN NULL;
        END IF;
    END IF;

    IF TG_OP = 'DELETE' THEN
        cause := OLD;
        how := 'deleted';
    ELSE
        cause := NEW;
        how := NEW.status;
    END IF;

    IF how = 'completed' THEN
        -- One fewer dependency to wait for; the last one releases.
        FOR q IN
            WITH released AS (
                UPDATE skiplock_tasks AS d
                SET deps_pending = d.deps_pending - 1,
                    status = CASE WHEN d.deps_pending = 1 AND d.status = 'waiting' THEN 'pending' ELSE d.status END,
                    run_at = CASE WHEN d.deps_pending = 1 AND d.status = 'waiting' THEN greatest(d.run_at, now()) ELSE d.run_at END
                WHERE d.id = ANY(cause.dependents) AND d.deps_pending > 0
                RETURNING d.queue, d.status, d.run_at
            )
            SELECT DISTINCT r.queue FROM released AS r WHERE r.status = 'pending' AND r.run_at <= now()
        LOOP
            PERFORM pg_notify(channel, q);
        END LOOP;
        RETURN NULL;
    END IF;

    IF how IN ('failed', 'cancelled', 'deleted') THEN
        -- The first level names the cause; each level after names the
        -- dependency whose cancellation reached it. A task that asked to
        -- wait stays, and so does what waits for it, unless the cause is
        -- gone for good (deleted).
        WITH c AS (
            UPDATE skiplock_tasks AS d
            SET status = 'cancelled',
                finished_at = now(),
                errors = d.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', d.attempt, 'outcome', 'dependency_' || how,
                    'error', format('dependency %s (%s) %s', cause.id, cause.name,
                                    CASE how WHEN 'failed' THEN 'failed for good'
                                             WHEN 'cancelled' THEN 'was cancelled'
                                             ELSE 'was deleted before it completed' END),
                    'finished_at', now()))
            WHERE d.id = ANY(cause.dependents)
              AND d.status = 'waiting'
              AND (how = 'deleted' OR d.dependency_failure IS DISTINCT FROM 'wait')
            RETURNING d.id
        )
        SELECT array_agg(c.id) INTO changed FROM c;
        WHILE changed IS NOT NULL LOOP
            WITH c AS (
                UPDATE skiplock_tasks AS d
                SET status = 'cancelled',
                    finished_at = now(),
                    errors = d.errors || jsonb_build_array(jsonb_build_object(
                        'attempt', d.attempt, 'outcome', 'dependency_cancelled',
                        'error', (SELECT format('dependency %s (%s) was cancelled', p.id, p.name)
                                  FROM skiplock_tasks AS p
                                  WHERE p.id = ANY(d.depends_on) AND p.id = ANY(changed)
                                  ORDER BY p.id LIMIT 1),
                        'finished_at', now()))
                WHERE d.id IN (SELECT unnest(p.dependents) FROM skiplock_tasks AS p WHERE p.id = ANY(changed))
                  AND d.status = 'waiting'
                  AND d.dependency_failure IS DISTINCT FROM 'wait'
                RETURNING d.id
            )
            SELECT array_agg(c.id) INTO changed FROM c;
        END LOOP;
        RETURN NULL;
    END IF;

    -- Requeued (from failed or cancelled): the tasks that its failure or
    -- cancellation cancelled wait again, level by level, unless another of
    -- their dependencies is still failed or cancelled.
    changed := ARRAY[cause.id];
    WHILE changed IS NOT NULL LOOP
        WITH c AS (
            UPDATE skiplock_tasks AS d
            SET status = 'waiting',
                finished_at = NULL,
                errors = d.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', d.attempt, 'outcome', 'requeued',
                    'error', (SELECT format('dependency %s (%s) was requeued', p.id, p.name)
                              FROM skiplock_tasks AS p
                              WHERE p.id = ANY(d.depends_on) AND p.id = ANY(changed)
                              ORDER BY p.id LIMIT 1),
                    'finished_at', now()))
            WHERE d.id IN (SELECT unnest(p.dependents) FROM skiplock_tasks AS p WHERE p.id = ANY(changed))
              AND d.status = 'cancelled'
              AND d.errors -> -1 ->> 'outcome' IN ('dependency_failed', 'dependency_cancelled')
              AND NOT EXISTS (
                  SELECT 1 FROM skiplock_tasks AS p
                  WHERE p.id = ANY(d.depends_on) AND p.status IN ('failed', 'cancelled'))
            RETURNING d.id
        )
        SELECT array_agg(c.id) INTO changed FROM c;
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION skiplock_sequence_advance() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- The trigger's WHEN tests the column and the transition only;
    -- an update that moves nothing on returns here.
    IF TG_OP = 'UPDATE' THEN
        IF NOT (OLD.status IS DISTINCT FROM NEW.status
                AND (NEW.status IN ('completed', 'cancelled') OR (NEW.status = 'failed' AND NEW.sequence_hold IS NOT TRUE))) THEN
            RETURN NULL;
        END IF;
    END IF;

    IF TG_OP = 'DELETE' THEN
        PERFORM skiplock_sequence_release(OLD.sequence_key, left('skiplock_' || TG_TABLE_SCHEMA, 63) COLLATE "default");
    ELSE
        PERFORM skiplock_sequence_release(NEW.sequence_key, left('skiplock_' || TG_TABLE_SCHEMA, 63) COLLATE "default");
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION skiplock_batch_advance() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    channel text := left('skiplock_' || TG_TABLE_SCHEMA, 63);
    task skiplock_tasks;
    was text;
    now_is text;
    b skiplock_batches;
    c integer;
    f integer;
    x integer;
    q text;
BEGIN
    -- The trigger's WHEN tests the column and the transition only;
    -- an update that moves nothing on returns here.
    IF TG_OP = 'UPDATE' THEN
        IF NOT (OLD.status IS DISTINCT FROM NEW.status
                AND (NEW.status IN ('completed', 'failed', 'cancelled') OR OLD.status IN ('completed', 'failed', 'cancelled'))) THEN
            RETURN NULL;
        END IF;
    END IF;

    IF TG_OP = 'DELETE' THEN
        task := OLD;
        was := OLD.status;
        now_is := 'cancelled';
    ELSE
        task := NEW;
        was := OLD.status;
        now_is := NEW.status;
    END IF;

    -- The callback ids never change: no lock to tell a callback.
    SELECT * INTO b FROM skiplock_batches WHERE id = task.batch_id;
    IF NOT FOUND OR task.id = b.on_finish_task_id OR task.id = b.on_success_task_id THEN
        RETURN NULL;
    END IF;

    -- Concurrent finishers of one batch queue here; each reads the counts
    -- the one before it committed.
    SELECT * INTO b FROM skiplock_batches WHERE id = task.batch_id FOR NO KEY UPDATE;
    c := b.completed; f := b.failed; x := b.cancelled;
    CASE was
        WHEN 'completed' THEN c := c - 1;
        WHEN 'failed' THEN f := f - 1;
        WHEN 'cancelled' THEN x := x - 1;
        ELSE NULL;
    END CASE;
    CASE now_is
        WHEN 'completed' THEN c := c + 1;
        WHEN 'failed' THEN f := f + 1;
        WHEN 'cancelled' THEN x := x + 1;
        ELSE NULL;
    END CASE;
    UPDATE skiplock_batches
    SET completed = c, failed = f, cancelled = x,
        finished_at = CASE WHEN c + f + x = b.total THEN coalesce(b.finished_at, now()) ELSE b.finished_at END
    WHERE id = b.id;

    IF c + f + x < b.total OR b.completed + b.failed + b.cancelled = b.total THEN
        RETURN NULL;
    END IF;

    IF b.finished_at IS NULL THEN
        FOR q IN
            UPDATE skiplock_tasks AS t
            SET status = 'pending', run_at = greatest(t.run_at, now())
            WHERE t.id IN (b.on_finish_task_id, CASE WHEN c = b.total THEN b.on_success_task_id END)
              AND t.status = 'waiting'
            RETURNING t.queue
        LOOP
            PERFORM pg_notify(channel, q);
        END LOOP;
        IF c < b.total THEN
            UPDATE skiplock_tasks AS t
            SET status = 'cancelled',
                finished_at = now(),
                errors = t.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', t.attempt, 'outcome', 'batch_failed',
                    'error', format('batch %s finished with %s completed, %s failed and %s cancelled of %s', b.id, c, f, x, b.total),
                    'finished_at', now()))
            WHERE t.id = b.on_success_task_id AND t.status = 'waiting';
        END IF;
    ELSIF c = b.total THEN
        -- Every member completed at last, after requeues: the success
        -- callback that the first finish cancelled runs now.
        FOR q IN
            UPDATE skiplock_tasks AS t
            SET status = 'pending', run_at = now(), finished_at = NULL,
                errors = t.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', t.attempt, 'outcome', 'requeued',
                    'error', format('batch %s: every member has completed', b.id),
                    'finished_at', now()))
            WHERE t.id = b.on_success_task_id AND t.status = 'cancelled'
              AND t.errors -> -1 ->> 'outcome' = 'batch_failed'
            RETURNING t.queue
        LOOP
            PERFORM pg_notify(channel, q);
        END LOOP;
    END IF;
    RETURN NULL;
END;
$$;

DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['skiplock_workflow_advance()', 'skiplock_sequence_advance()', 'skiplock_batch_advance()'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END
$$;

DROP TRIGGER skiplock_tasks_workflow_update ON skiplock_tasks;
CREATE TRIGGER skiplock_tasks_workflow_update
    AFTER UPDATE OF status ON skiplock_tasks
    FOR EACH ROW
    WHEN (NEW.dependents IS NOT NULL AND (OLD.status <> 'pending' OR NEW.status <> 'running'))
    EXECUTE FUNCTION skiplock_workflow_advance();

DROP TRIGGER skiplock_tasks_sequence_update ON skiplock_tasks;
CREATE TRIGGER skiplock_tasks_sequence_update
    AFTER UPDATE OF status ON skiplock_tasks
    FOR EACH ROW
    WHEN (NEW.sequence_key IS NOT NULL AND (OLD.status <> 'pending' OR NEW.status <> 'running'))
    EXECUTE FUNCTION skiplock_sequence_advance();

DROP TRIGGER skiplock_tasks_batch_update ON skiplock_tasks;
CREATE TRIGGER skiplock_tasks_batch_update
    AFTER UPDATE OF status ON skiplock_tasks
    FOR EACH ROW
    WHEN (NEW.batch_id IS NOT NULL AND (OLD.status <> 'pending' OR NEW.status <> 'running'))
    EXECUTE FUNCTION skiplock_batch_advance();

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 25';
