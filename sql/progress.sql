-- name: TaskProgressSet :execrows
-- Records a running task's progress (worker.SetProgress) at once, fenced
-- as the outcome write is (status running, same attempt, same worker, same
-- claim time; see TaskFinishMany): no row means the task is no longer this
-- attempt's.
UPDATE skiplock_tasks
SET progress = @progress::jsonb
WHERE id = @id::bigint
  AND status = 'running'
  AND attempt = @attempt::integer
  AND worker_id = @worker_id::text
  AND started_at = @started_at::timestamptz;

-- name: TaskCheckpointSave :execrows
-- Records a running task's checkpoint (worker.SaveCheckpoint) at once,
-- fenced as TaskProgressSet is.
UPDATE skiplock_tasks
SET checkpoint = @checkpoint::jsonb
WHERE id = @id::bigint
  AND status = 'running'
  AND attempt = @attempt::integer
  AND worker_id = @worker_id::text
  AND started_at = @started_at::timestamptz;

-- name: TaskCheckpointLoad :many
-- Reads a running task's last checkpoint (worker.LoadCheckpoint), fenced
-- as TaskProgressSet is: no row means the task is no longer this
-- attempt's; a row with a NULL checkpoint means none was saved.
SELECT checkpoint
FROM skiplock_tasks
WHERE id = @id::bigint
  AND status = 'running'
  AND attempt = @attempt::integer
  AND worker_id = @worker_id::text
  AND started_at = @started_at::timestamptz;
