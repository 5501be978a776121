-- Workflow cascades level by level instead of by recursion. In migration 8
-- a cancellation (or a requeue's revival) reached a chain's far end by the
-- trigger firing again for each task it changed: one nesting of trigger,
-- function and executor per level, so a chain of about a thousand tasks ran
-- out of PostgreSQL's stack (max_stack_depth), and the statement that failed
-- would have been a worker's whole outcome write. Now the function walks the
-- levels in a loop, and the trigger does not fire for the function's own
-- updates (pg_trigger_depth() = 0 in its WHEN clause).
--
-- The price of that WHEN: a status change made by some other trigger (an
-- application's trigger that updates skiplock_tasks) does not move a
-- workflow on. skiplock's own statements are never inside a trigger.
CREATE OR REPLACE FUNCTION skiplock_workflow_advance() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    channel text := left('skiplock_' || TG_TABLE_SCHEMA, 63);
    q text;
    cause skiplock_tasks;
    how text;
    changed bigint[];
BEGIN
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

DROP TRIGGER skiplock_tasks_workflow_update ON skiplock_tasks;
CREATE TRIGGER skiplock_tasks_workflow_update
    AFTER UPDATE OF status ON skiplock_tasks
    FOR EACH ROW
    WHEN (NEW.dependents IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
          AND (NEW.status IN ('completed', 'failed', 'cancelled') OR OLD.status IN ('failed', 'cancelled'))
          AND pg_trigger_depth() = 0)
    EXECUTE FUNCTION skiplock_workflow_advance();

DROP TRIGGER skiplock_tasks_workflow_delete ON skiplock_tasks;
CREATE TRIGGER skiplock_tasks_workflow_delete
    AFTER DELETE ON skiplock_tasks
    FOR EACH ROW
    WHEN (OLD.dependents IS NOT NULL AND OLD.status <> 'completed' AND pg_trigger_depth() = 0)
    EXECUTE FUNCTION skiplock_workflow_advance();

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 9';
