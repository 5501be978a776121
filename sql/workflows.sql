-- name: WorkflowCreate :one
-- A workflow's row: its name and, for named steps, step -> task id.
INSERT INTO skiplock_workflows (name, steps)
VALUES (@name::text, @steps::jsonb)
RETURNING id;

-- name: TaskInsertWorkflow :exec
-- Inserts the tasks of a new workflow with the ids reserved for them
-- (each task's edges name the others): a task with dependencies waits, the
-- others are pending. Edges come as array literals ('{1,2}'), '' for none.
-- All dependencies are new tasks of the same workflow, invisible to anyone
-- else until commit, so no lock is needed.
INSERT INTO skiplock_tasks (id, queue, name, payload, metadata, priority, run_at, max_attempts, timeout_ms,
                            exclusive_key, limit_key, status, workflow_id, depends_on, dependents, deps_pending,
                            dependency_failure)
OVERRIDING SYSTEM VALUE
SELECT u.id, u.queue, u.name, u.payload, u.metadata, u.priority,
       CASE WHEN u.run_at = 'epoch' THEN now() + u.delay_ms * interval '1 millisecond' ELSE u.run_at END,
       u.max_attempts, nullif(u.timeout_ms, 0), nullif(u.exclusive_key, ''), nullif(u.limit_key, ''),
       CASE WHEN u.depends_on = '' THEN 'pending' ELSE 'waiting' END,
       @workflow_id::bigint,
       nullif(u.depends_on, '')::bigint[],
       nullif(u.dependents, '')::bigint[],
       cardinality(nullif(u.depends_on, '')::bigint[]),
       nullif(u.dependency_failure, '')
FROM (
    SELECT unnest(@ids::bigint[])                 AS id,
           unnest(@queues::text[])                AS queue,
           unnest(@names::text[])                 AS name,
           unnest(@payloads::jsonb[])             AS payload,
           unnest(@metadatas::jsonb[])            AS metadata,
           unnest(@priorities::smallint[])        AS priority,
           unnest(@run_ats::timestamptz[])        AS run_at,
           unnest(@delay_ms::bigint[])            AS delay_ms,
           unnest(@max_attempts::integer[])       AS max_attempts,
           unnest(@timeout_ms::bigint[])          AS timeout_ms,
           unnest(@exclusive_keys::text[])        AS exclusive_key,
           unnest(@limit_keys::text[])            AS limit_key,
           unnest(@depends_on::text[])            AS depends_on,
           unnest(@dependents::text[])            AS dependents,
           unnest(@dependency_failures::text[])   AS dependency_failure
) AS u;

-- name: TaskDependenciesLock :many
-- Locks the dependencies of a task about to be enqueued, in id order, and
-- reads where they stand: a dependency that completes meanwhile waits for
-- this transaction, then finds the new task among its dependents.
SELECT t.id, t.name, t.status, t.workflow_id
FROM skiplock_tasks AS t
WHERE t.id = ANY(@ids::bigint[])
ORDER BY t.id
FOR NO KEY UPDATE;

-- name: TaskInsertDependent :many
-- Inserts one task with dependencies (queue.WithDependsOn), in the status
-- its dependencies call for: waiting, pending (all completed) or cancelled
-- (one failed or was cancelled, with the reason in errors). Returns nothing
-- when its unique key is taken.
INSERT INTO skiplock_tasks (queue, name, payload, metadata, priority, run_at, max_attempts, timeout_ms,
                            unique_key, unique_window_key, exclusive_key, limit_key,
                            status, finished_at, errors, workflow_id, depends_on, deps_pending, dependency_failure)
SELECT u.queue, u.name, u.payload, u.metadata, u.priority,
       CASE WHEN u.run_at = 'epoch' THEN now() + u.delay_ms * interval '1 millisecond' ELSE u.run_at END,
       u.max_attempts, nullif(u.timeout_ms, 0),
       nullif(u.unique_key, ''), nullif(u.unique_window_key, ''), nullif(u.exclusive_key, ''), nullif(u.limit_key, ''),
       u.status, CASE WHEN u.status = 'cancelled' THEN now() END, u.errors,
       u.workflow_id, u.depends_on, u.deps_pending, nullif(u.dependency_failure, '')
FROM (
    SELECT @queue::text AS queue, @name::text AS name, @payload::jsonb AS payload, @metadata::jsonb AS metadata,
           @priority::smallint AS priority, @run_at::timestamptz AS run_at, @delay_ms::bigint AS delay_ms,
           @max_attempts::integer AS max_attempts, @timeout_ms::bigint AS timeout_ms,
           @unique_key::text AS unique_key, @unique_window_key::text AS unique_window_key,
           @exclusive_key::text AS exclusive_key, @limit_key::text AS limit_key, @status::text AS status, @errors::jsonb AS errors,
           @workflow_id::bigint AS workflow_id, @depends_on::bigint[] AS depends_on,
           @deps_pending::integer AS deps_pending, @dependency_failure::text AS dependency_failure
) AS u
ON CONFLICT DO NOTHING
RETURNING id;

-- name: TaskAddDependent :exec
-- Records a new dependent on each of its dependencies (locked by
-- TaskDependenciesLock), and puts those outside a workflow in its.
UPDATE skiplock_tasks AS t
SET dependents = array_append(coalesce(t.dependents, '{}'), @dependent_id::bigint),
    workflow_id = coalesce(t.workflow_id, @workflow_id::bigint)
WHERE t.id = ANY(@ids::bigint[]);

-- name: WorkflowGet :one
SELECT w.id, w.name, w.steps, w.created_at
FROM skiplock_workflows AS w
WHERE w.id = @id::bigint;

-- name: WorkflowTasks :many
-- A workflow's tasks, in id order (the order they were enqueued).
SELECT t.*
FROM skiplock_tasks AS t
WHERE t.workflow_id = @workflow_id::bigint
ORDER BY t.id;

-- name: TaskDependencyOutputs :many
-- The tasks a task depends on, with their outputs and, in a workflow with
-- named steps, their step names.
SELECT p.id, p.name, p.status, p.output,
       coalesce((SELECT s.key FROM jsonb_each(w.steps) AS s WHERE s.value = to_jsonb(p.id) LIMIT 1), '')::text AS step
FROM skiplock_tasks AS d
JOIN skiplock_tasks AS p ON p.id = ANY(d.depends_on)
LEFT JOIN skiplock_workflows AS w ON w.id = d.workflow_id
WHERE d.id = @id::bigint
ORDER BY p.id;
