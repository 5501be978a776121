-- name: BatchCreate :one
-- A batch's row: its member count and its callbacks' task ids (reserved
-- before the tasks are inserted; NULL for none).
INSERT INTO skiplock_batches (name, total, on_finish_task_id, on_success_task_id)
VALUES (@name::text, @total::integer, sqlc.narg(on_finish_task_id)::bigint, sqlc.narg(on_success_task_id)::bigint)
RETURNING id, created_at;

-- name: TaskInsertBatch :exec
-- Inserts the tasks of a new batch with the ids reserved for them: the
-- members pending (due at once or at their run time), the callbacks
-- waiting until the batch's last member finishes (skiplock_batch_advance).
INSERT INTO skiplock_tasks (id, queue, name, payload, metadata, priority, run_at, max_attempts, timeout_ms,
                            exclusive_key, limit_key, status, batch_id)
OVERRIDING SYSTEM VALUE
SELECT u.id, u.queue, u.name, u.payload, u.metadata, u.priority,
       CASE WHEN u.run_at = 'epoch' THEN now() + u.delay_ms * interval '1 millisecond' ELSE u.run_at END,
       u.max_attempts, nullif(u.timeout_ms, 0), nullif(u.exclusive_key, ''), nullif(u.limit_key, ''),
       u.status, @batch_id::bigint
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
           unnest(@statuses::text[])              AS status
) AS u;

-- name: BatchGet :one
SELECT b.*
FROM skiplock_batches AS b
WHERE b.id = @id::bigint;

-- name: BatchOfTask :one
-- The batch of a task, member or callback.
SELECT b.*
FROM skiplock_tasks AS t
JOIN skiplock_batches AS b ON b.id = t.batch_id
WHERE t.id = @task_id::bigint;

-- name: BatchList :many
-- Batches newest first, before_id exclusive (0 for the newest), running
-- (finished_at NULL), finished or all.
SELECT b.*
FROM skiplock_batches AS b
WHERE (@before_id::bigint = 0 OR b.id < @before_id::bigint)
  AND (@state::text = ''
       OR (@state::text = 'running' AND b.finished_at IS NULL)
       OR (@state::text = 'finished' AND b.finished_at IS NOT NULL))
ORDER BY b.id DESC
LIMIT @max_rows::integer;

-- name: BatchTasks :many
-- A batch's tasks still stored, members and callbacks, in id order.
SELECT t.*
FROM skiplock_tasks AS t
WHERE t.batch_id = @batch_id::bigint
ORDER BY t.id;
