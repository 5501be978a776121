-- Workflows: tasks that wait for other tasks (a DAG).
--
-- A task with dependencies is inserted 'waiting': outside the claim's
-- partial index (status = 'pending'), so a waiting task costs the claim
-- nothing. deps_pending counts its dependencies that have not completed;
-- the completion that brings it to zero makes it pending, in the same
-- transaction as the completion's write (the trigger below).
--
-- Edges are kept on both ends: depends_on on the dependent (for reading
-- its dependencies' outputs and for showing the DAG), dependents on the
-- dependency (for releasing them). The release reads dependents from the
-- dependency's row as the completion writes it, under that row's lock, so a
-- dependent enqueued while its dependency completes is never missed. Every
-- new column is NULL on a task outside workflows: a bit in the null bitmap
-- that every row already has.
CREATE TABLE skiplock_workflows (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL DEFAULT '',
    -- Step name -> task id, for workflows enqueued with named steps.
    steps      jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT skiplock_workflows_steps_check CHECK (jsonb_typeof(steps) = 'object')
);

ALTER TABLE skiplock_tasks
    ADD COLUMN workflow_id        bigint,
    ADD COLUMN depends_on         bigint[],
    ADD COLUMN dependents         bigint[],
    ADD COLUMN deps_pending       integer,
    -- 'wait' leaves the task waiting when a dependency fails for good or is
    -- cancelled; NULL (the default) cancels it.
    ADD COLUMN dependency_failure text,
    -- NOT VALID: the column is new and NULL in every row, so no row can
    -- break the check, and checking them would scan the whole table under
    -- this file's exclusive lock on it, stopping every enqueue and claim.
    -- Every new row version is checked.
    ADD CONSTRAINT skiplock_tasks_dependency_failure_check CHECK (dependency_failure IN ('cancel', 'wait')) NOT VALID;

-- The new check admits every status the old one did, so every row already
-- satisfies it: NOT VALID, and not validated, for the same reason.
ALTER TABLE skiplock_tasks DROP CONSTRAINT skiplock_tasks_status_check;
ALTER TABLE skiplock_tasks ADD CONSTRAINT skiplock_tasks_status_check
    CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled', 'waiting')) NOT VALID;

-- A workflow's tasks, for `skiplock workflow show` and the dashboard.
-- skiplock:concurrently
CREATE INDEX skiplock_tasks_workflow_idx
    ON skiplock_tasks (workflow_id)
    WHERE workflow_id IS NOT NULL;

-- Moves a workflow on when one of its tasks changes status, in the
-- transaction (and the statement) of that change, whoever makes it: a
-- worker's outcome write, the rescuer, an operator's cancel or requeue.
--   completed: each dependent has one dependency fewer to wait for; one
--     that has none left and is waiting becomes pending (due now, or at its
--     own later run_at), and the workers of its queue are woken.
--   failed (for good) or cancelled: waiting dependents are cancelled, with
--     the reason in their history, unless they asked to wait
--     (dependency_failure = 'wait'). Cancelling one fires this trigger for
--     it, so the whole subtree goes.
--   failed or cancelled, then requeued: the dependents it had cancelled
--     wait again (and theirs, by the same recursion), unless another of
--     their dependencies is still failed or cancelled.
--   deleted before completing: its waiting dependents can never run, and
--     are cancelled whatever they asked.
-- Each statement in a VOLATILE function takes a new snapshot under READ
-- COMMITTED, so the release sees a dependent that committed while the
-- completion waited for the dependency's row lock (a data-modifying CTE in
-- the outcome write would not: its snapshot predates that commit).
CREATE FUNCTION skiplock_workflow_advance() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    channel text := left('skiplock_' || TG_TABLE_SCHEMA, 63);
    q text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE skiplock_tasks AS d
        SET status = 'cancelled',
            finished_at = now(),
            errors = d.errors || jsonb_build_array(jsonb_build_object(
                'attempt', d.attempt, 'outcome', 'dependency_deleted',
                'error', format('dependency %s (%s) was deleted while %s', OLD.id, OLD.name, OLD.status),
                'finished_at', now()))
        WHERE d.id = ANY(OLD.dependents) AND d.status = 'waiting';
        RETURN NULL;
    END IF;

    IF NEW.status = 'completed' THEN
        FOR q IN
            WITH released AS (
                UPDATE skiplock_tasks AS d
                SET deps_pending = d.deps_pending - 1,
                    status = CASE WHEN d.deps_pending = 1 AND d.status = 'waiting' THEN 'pending' ELSE d.status END,
                    run_at = CASE WHEN d.deps_pending = 1 AND d.status = 'waiting' THEN greatest(d.run_at, now()) ELSE d.run_at END
                WHERE d.id = ANY(NEW.dependents) AND d.deps_pending > 0
                RETURNING d.queue, d.status, d.run_at
            )
            SELECT DISTINCT r.queue FROM released AS r WHERE r.status = 'pending' AND r.run_at <= now()
        LOOP
            PERFORM pg_notify(channel, q);
        END LOOP;
    ELSIF NEW.status IN ('failed', 'cancelled') THEN
        UPDATE skiplock_tasks AS d
        SET status = 'cancelled',
            finished_at = now(),
            errors = d.errors || jsonb_build_array(jsonb_build_object(
                'attempt', d.attempt, 'outcome', 'dependency_' || NEW.status,
                'error', format('dependency %s (%s) %s', NEW.id, NEW.name,
                                CASE NEW.status WHEN 'failed' THEN 'failed for good' ELSE 'was cancelled' END),
                'finished_at', now()))
        WHERE d.id = ANY(NEW.dependents)
          AND d.status = 'waiting'
          AND d.dependency_failure IS DISTINCT FROM 'wait';
    ELSIF OLD.status IN ('failed', 'cancelled') THEN
        UPDATE skiplock_tasks AS d
        SET status = 'waiting',
            finished_at = NULL,
            errors = d.errors || jsonb_build_array(jsonb_build_object(
                'attempt', d.attempt, 'outcome', 'requeued',
                'error', format('dependency %s (%s) was requeued', NEW.id, NEW.name),
                'finished_at', now()))
        WHERE d.id = ANY(NEW.dependents)
          AND d.status = 'cancelled'
          AND d.errors -> -1 ->> 'outcome' IN ('dependency_failed', 'dependency_cancelled')
          AND NOT EXISTS (
              SELECT 1 FROM skiplock_tasks AS p
              WHERE p.id = ANY(d.depends_on) AND p.id <> NEW.id AND p.status IN ('failed', 'cancelled'));
    END IF;
    RETURN NULL;
END;
$$;

-- The WHEN clauses keep this off every other row: a task outside
-- workflows has no dependents, and a claim or a retry is no change that
-- matters here.
CREATE TRIGGER skiplock_tasks_workflow_update
    AFTER UPDATE OF status ON skiplock_tasks
    FOR EACH ROW
    WHEN (NEW.dependents IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
          AND (NEW.status IN ('completed', 'failed', 'cancelled') OR OLD.status IN ('failed', 'cancelled')))
    EXECUTE FUNCTION skiplock_workflow_advance();

CREATE TRIGGER skiplock_tasks_workflow_delete
    AFTER DELETE ON skiplock_tasks
    FOR EACH ROW
    WHEN (OLD.dependents IS NOT NULL AND OLD.status <> 'completed')
    EXECUTE FUNCTION skiplock_workflow_advance();

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 8';
