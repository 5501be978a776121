-- name: TaskClaimByID :one
-- Claims one named pending task for Worker.RunTask, whatever its run time,
-- its queue's pause or its rate limits: marked running as the claim marks
-- it (attempt + 1, this worker), and guarded by a lease whatever the
-- worker's mode, so that any worker's rescuer takes it back if this
-- process dies. It takes only the names given (those RunTask has handlers
-- for). No row: the task is not pending, has another name, or does not
-- exist. The columns are TaskClaim's.
UPDATE skiplock_tasks AS t
SET status = 'running',
    attempt = t.attempt + 1,
    worker_id = @worker_id::text,
    started_at = now(),
    finished_at = NULL,
    locked_until = now() + interval '1 millisecond' * @lease_ms::bigint
WHERE t.id = @id::bigint
  AND t.status = 'pending'
  AND t.name = ANY(@names::text[])
RETURNING t.id, t.queue, t.name, t.payload, t.metadata, t.priority, t.attempt,
          t.max_attempts, t.timeout_ms, t.run_at, t.created_at, t.started_at,
          '{}'::integer[] AS limit_locks, -- run outside any concurrency limit
          coalesce(t.exclusive_key, '')::text AS exclusive_key;
