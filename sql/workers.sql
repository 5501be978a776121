-- name: WorkerRegister :exec
INSERT INTO skiplock_workers (id, host, pid, queues, lock_backend_pid)
VALUES (@id::text, @host::text, @pid::integer, @queues::text[], @lock_backend_pid::integer)
ON CONFLICT (id) DO UPDATE
SET lock_backend_pid = excluded.lock_backend_pid, heartbeat_at = now();

-- name: WorkerHeartbeat :exec
UPDATE skiplock_workers SET heartbeat_at = now() WHERE id = @id::text;

-- name: WorkerPrune :execrows
-- Worker rows are the execution record's host and pid; keep them well past
-- the life of their tasks' error history.
DELETE FROM skiplock_workers WHERE heartbeat_at < now() - make_interval(secs => @older_than_seconds::double precision);

-- name: TaskRetire :execrows
-- Deletes one batch of tasks of a finished status that finished long
-- enough ago, for the elected cleaner. The finished index orders each
-- status and queue by finished_at, so the oldest come first.
DELETE FROM skiplock_tasks
WHERE id IN (
    SELECT r.id
    FROM skiplock_tasks AS r
    WHERE r.status = @status::text
      AND r.status IN ('completed', 'failed', 'cancelled')
      AND r.finished_at < now() - make_interval(secs => @older_than_seconds::double precision)
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
);
