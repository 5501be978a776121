-- Back to migration 8's recursive cascade and its triggers.
CREATE OR REPLACE FUNCTION skiplock_workflow_advance() RETURNS trigger
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
DROP TRIGGER skiplock_tasks_workflow_update ON skiplock_tasks;
CREATE TRIGGER skiplock_tasks_workflow_update
    AFTER UPDATE OF status ON skiplock_tasks
    FOR EACH ROW
    WHEN (NEW.dependents IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
          AND (NEW.status IN ('completed', 'failed', 'cancelled') OR OLD.status IN ('failed', 'cancelled')))
    EXECUTE FUNCTION skiplock_workflow_advance();

DROP TRIGGER skiplock_tasks_workflow_delete ON skiplock_tasks;
CREATE TRIGGER skiplock_tasks_workflow_delete
    AFTER DELETE ON skiplock_tasks
    FOR EACH ROW
    WHEN (OLD.dependents IS NOT NULL AND OLD.status <> 'completed')
    EXECUTE FUNCTION skiplock_workflow_advance();

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 8';
