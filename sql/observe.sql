-- name: QueueDepth :many
-- Read on every metrics scrape and dashboard refresh, so, like the other
-- queries here, it reads through partial indexes and costs what the backlog
-- or the recent past holds, not the table's history (QueueStats reads every
-- row).
-- Per queue: pending tasks, the due ones among them and how long the oldest
-- due one has waited past its run time, running and failed tasks, and
-- whether the queue is paused. Pending rows come from the claim index,
-- running rows from the running index, failed rows from the finished index.
WITH pending AS (
    SELECT t.queue,
           count(*) AS pending,
           count(*) FILTER (WHERE t.run_at <= now()) AS due,
           min(t.run_at) FILTER (WHERE t.run_at <= now()) AS oldest_due
    FROM skiplock_tasks AS t
    WHERE t.status = 'pending'
    GROUP BY t.queue
), running AS (
    SELECT t.queue, count(*) AS running
    FROM skiplock_tasks AS t
    WHERE t.status = 'running'
    GROUP BY t.queue
), failed AS (
    SELECT t.queue, count(*) AS failed
    FROM skiplock_tasks AS t
    WHERE t.status = 'failed'
    GROUP BY t.queue
), queues AS (
    SELECT pending.queue FROM pending
    UNION SELECT running.queue FROM running
    UNION SELECT failed.queue FROM failed
    UNION SELECT q.name FROM skiplock_queues AS q WHERE q.paused_at IS NOT NULL
)
SELECT queues.queue::text AS queue,
       coalesce(pending.pending, 0)::bigint AS pending,
       coalesce(pending.due, 0)::bigint AS due,
       coalesce(extract(epoch FROM now() - pending.oldest_due), 0)::float8 AS oldest_due_seconds,
       coalesce(running.running, 0)::bigint AS running,
       coalesce(failed.failed, 0)::bigint AS failed,
       (q.paused_at IS NOT NULL)::boolean AS paused
FROM queues
LEFT JOIN pending ON pending.queue = queues.queue
LEFT JOIN running ON running.queue = queues.queue
LEFT JOIN failed ON failed.queue = queues.queue
LEFT JOIN skiplock_queues AS q ON q.name = queues.queue
ORDER BY queues.queue;

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
-- runs now, and whether its lock session is still connected.
SELECT w.id,
       w.host,
       w.pid,
       w.queues,
       w.started_at,
       w.heartbeat_at,
       coalesce(w.lock_backend_pid, 0)::integer AS lock_backend_pid,
       EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity AS a WHERE a.pid = w.lock_backend_pid)::boolean AS connected,
       (SELECT count(*) FROM skiplock_tasks AS t WHERE t.status = 'running' AND t.worker_id = w.id)::bigint AS running
FROM skiplock_workers AS w
ORDER BY w.heartbeat_at DESC, w.id
LIMIT @max_rows::integer;
