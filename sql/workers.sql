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
