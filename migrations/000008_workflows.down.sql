DROP TRIGGER IF EXISTS skiplock_tasks_workflow_delete ON skiplock_tasks;
DROP TRIGGER IF EXISTS skiplock_tasks_workflow_update ON skiplock_tasks;
DROP FUNCTION IF EXISTS skiplock_workflow_advance();
DROP INDEX IF EXISTS skiplock_tasks_workflow_idx;

-- Waiting tasks have no place in the older schema: they are cancelled.
UPDATE skiplock_tasks SET status = 'cancelled', finished_at = now() WHERE status = 'waiting';
ALTER TABLE skiplock_tasks DROP CONSTRAINT skiplock_tasks_status_check;
ALTER TABLE skiplock_tasks ADD CONSTRAINT skiplock_tasks_status_check
    CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled'));

ALTER TABLE skiplock_tasks
    DROP CONSTRAINT IF EXISTS skiplock_tasks_dependency_failure_check,
    DROP COLUMN IF EXISTS dependency_failure,
    DROP COLUMN IF EXISTS deps_pending,
    DROP COLUMN IF EXISTS dependents,
    DROP COLUMN IF EXISTS depends_on,
    DROP COLUMN IF EXISTS workflow_id;
DROP TABLE IF EXISTS skiplock_workflows;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 7';
