-- name: QueueThroughput :many
-- Tasks completed and failed per queue and time bucket since @since: bucket
-- n counts the tasks that finished in [since + n*bucket, since + (n+1)*bucket).
-- The queues of each status come from a loose index scan of the finished
-- index (one probe per queue, however many rows each has), and each one's
-- recent rows from a range scan of it. The repeated status IN lists let
-- the planner use the partial index where the status is not a constant.
WITH RECURSIVE keys AS (
    SELECT s.status,
           (SELECT t.queue
            FROM skiplock_tasks AS t
            WHERE t.status IN ('completed', 'failed') AND t.status = s.status
            ORDER BY t.queue
            LIMIT 1) AS queue
    FROM (SELECT unnest('{completed,failed}'::text[]) AS status) AS s
    UNION ALL
    SELECT keys.status,
           (SELECT t.queue
            FROM skiplock_tasks AS t
            WHERE t.status IN ('completed', 'failed') AND t.status = keys.status AND t.queue > keys.queue
            ORDER BY t.queue
            LIMIT 1)
    FROM keys
    WHERE keys.queue IS NOT NULL
)
SELECT keys.queue::text AS queue,
       keys.status::text AS status,
       b.bucket,
       b.finished
FROM keys, LATERAL (
    SELECT floor(extract(epoch FROM t.finished_at - @since::timestamptz) / @bucket_seconds::float8)::integer AS bucket,
           count(*)::bigint AS finished
    FROM skiplock_tasks AS t
    WHERE t.status IN ('completed', 'failed')
      AND t.status = keys.status
      AND t.queue = keys.queue
      AND t.finished_at >= @since::timestamptz
    GROUP BY 1
) AS b
WHERE keys.queue IS NOT NULL
ORDER BY keys.queue, keys.status, b.bucket;

-- name: WorkerList :many
-- Registered worker processes, latest heartbeat first: how many tasks each
-- runs now, whether its lock session is still connected, and the task
-- names it handles (NULL from a worker that predates the column).
SELECT w.id,
       w.host,
       w.pid,
       w.queues,
       w.names,
       w.started_at,
       w.heartbeat_at,
       coalesce(w.lock_backend_pid, 0)::integer AS lock_backend_pid,
       EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity AS a WHERE a.pid = w.lock_backend_pid)::boolean AS connected,
       extract(epoch FROM now() - w.heartbeat_at)::float8 AS heartbeat_age_seconds,
       (SELECT count(*) FROM skiplock_tasks AS t WHERE t.status = 'running' AND t.worker_id = w.id)::bigint AS running
FROM skiplock_workers AS w
ORDER BY w.heartbeat_at DESC, w.id
LIMIT @max_rows::integer;

-- name: TaskUnhandled :many
-- Pending tasks that wait for a handler nobody runs: per queue and name,
-- those that no live worker (heartbeat within live_seconds) both claims
-- from (its queues) and handles (its names; NULL names, from a worker that
-- predates the column, count as every name). Counted per (queue, name)
-- first, from the pending rows alone, then matched against the workers.
WITH pending AS (
    SELECT t.queue, t.name, count(*) AS tasks, min(t.created_at) AS oldest_created_at, min(t.run_at) AS oldest_run_at
    FROM skiplock_tasks AS t
    WHERE t.status = 'pending'
    GROUP BY t.queue, t.name
)
SELECT p.queue::text AS queue, p.name::text AS name, p.tasks::bigint AS tasks,
       p.oldest_created_at::timestamptz AS oldest_created_at, p.oldest_run_at::timestamptz AS oldest_run_at
FROM pending AS p
WHERE NOT EXISTS (
    SELECT 1 FROM skiplock_workers AS w
    WHERE w.heartbeat_at > now() - make_interval(secs => @live_seconds::double precision)
      AND p.queue = ANY(w.queues)
      AND (w.names IS NULL OR p.name = ANY(w.names))
)
ORDER BY p.queue, p.name;
