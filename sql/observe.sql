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
       extract(epoch FROM now() - w.heartbeat_at)::float8 AS heartbeat_age_seconds,
       (SELECT count(*) FROM skiplock_tasks AS t WHERE t.status = 'running' AND t.worker_id = w.id)::bigint AS running
FROM skiplock_workers AS w
ORDER BY w.heartbeat_at DESC, w.id
LIMIT @max_rows::integer;
