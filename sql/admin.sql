-- name: TaskList :many
-- Operator queries (the skiplock command and the dashboard) filter tasks
-- the same way. A filter left empty (an empty array, a NULL) matches
-- everything. waits narrows pending tasks to those that are due, retrying
-- (waiting out a retry's backoff) or scheduled (enqueued to run later);
-- sequence_key keeps a sequence's tasks. since compares finished_at, or
-- created_at for tasks that have not finished; error_contains looks, ignoring case, at the error of the
-- task's last recorded attempt. Newest first, paged by before_id.
SELECT t.*
FROM skiplock_tasks AS t
WHERE t.status = ANY(@statuses::text[])
  AND (cardinality(@ids::bigint[]) = 0 OR t.id = ANY(@ids::bigint[]))
  AND (cardinality(@queues::text[]) = 0 OR t.queue = ANY(@queues::text[]))
  AND (cardinality(@names::text[]) = 0 OR t.name = ANY(@names::text[]))
  AND (sqlc.narg(since)::timestamptz IS NULL OR coalesce(t.finished_at, t.created_at) >= sqlc.narg(since)::timestamptz)
  AND (sqlc.narg(finished_before)::timestamptz IS NULL OR t.finished_at < sqlc.narg(finished_before)::timestamptz)
  AND (sqlc.narg(error_contains)::text IS NULL
       OR strpos(lower(t.errors -> -1 ->> 'error'), lower(sqlc.narg(error_contains)::text)) > 0)
  AND (cardinality(@waits::text[]) = 0 OR t.status <> 'pending'
       OR (CASE WHEN t.run_at <= now() THEN 'due' WHEN t.attempt > 0 THEN 'retrying' ELSE 'scheduled' END) = ANY(@waits::text[]))
  AND (sqlc.narg(sequence_key)::text IS NULL OR t.sequence_key = sqlc.narg(sequence_key)::text)
  AND (@before_id::bigint = 0 OR t.id < @before_id::bigint)
ORDER BY t.id DESC
LIMIT @max_rows::integer;

-- name: TaskCount :one
-- TaskList's count. It reads no column newer than migration 1, so that
-- `skiplock migrate down` can count the tasks of an older schema; a count
-- within a sequence is TaskCountInSequence.
SELECT count(*)::bigint AS count
FROM skiplock_tasks AS t
WHERE t.status = ANY(@statuses::text[])
  AND (cardinality(@ids::bigint[]) = 0 OR t.id = ANY(@ids::bigint[]))
  AND (cardinality(@queues::text[]) = 0 OR t.queue = ANY(@queues::text[]))
  AND (cardinality(@names::text[]) = 0 OR t.name = ANY(@names::text[]))
  AND (sqlc.narg(since)::timestamptz IS NULL OR coalesce(t.finished_at, t.created_at) >= sqlc.narg(since)::timestamptz)
  AND (sqlc.narg(finished_before)::timestamptz IS NULL OR t.finished_at < sqlc.narg(finished_before)::timestamptz)
  AND (sqlc.narg(error_contains)::text IS NULL
       OR strpos(lower(t.errors -> -1 ->> 'error'), lower(sqlc.narg(error_contains)::text)) > 0)
  AND (cardinality(@waits::text[]) = 0 OR t.status <> 'pending'
       OR (CASE WHEN t.run_at <= now() THEN 'due' WHEN t.attempt > 0 THEN 'retrying' ELSE 'scheduled' END) = ANY(@waits::text[]));

-- name: TaskCountInSequence :one
-- TaskCount within one sequence (migration 11).
SELECT count(*)::bigint AS count
FROM skiplock_tasks AS t
WHERE t.status = ANY(@statuses::text[])
  AND (cardinality(@ids::bigint[]) = 0 OR t.id = ANY(@ids::bigint[]))
  AND (cardinality(@queues::text[]) = 0 OR t.queue = ANY(@queues::text[]))
  AND (cardinality(@names::text[]) = 0 OR t.name = ANY(@names::text[]))
  AND (sqlc.narg(since)::timestamptz IS NULL OR coalesce(t.finished_at, t.created_at) >= sqlc.narg(since)::timestamptz)
  AND (sqlc.narg(finished_before)::timestamptz IS NULL OR t.finished_at < sqlc.narg(finished_before)::timestamptz)
  AND (sqlc.narg(error_contains)::text IS NULL
       OR strpos(lower(t.errors -> -1 ->> 'error'), lower(sqlc.narg(error_contains)::text)) > 0)
  AND (cardinality(@waits::text[]) = 0 OR t.status <> 'pending'
       OR (CASE WHEN t.run_at <= now() THEN 'due' WHEN t.attempt > 0 THEN 'retrying' ELSE 'scheduled' END) = ANY(@waits::text[]))
  AND t.sequence_key = @sequence_key::text;

-- name: TaskStatusMany :many
-- The current status of each of the given tasks that exists.
SELECT t.id, t.status
FROM skiplock_tasks AS t
WHERE t.id = ANY(@ids::bigint[])
ORDER BY t.id;

-- name: TaskRequeueBatch :one
-- Bulk writes go in batches, one statement each, so that a million failed
-- tasks are neither one huge transaction nor a long lock on the table. A
-- batch picks its rows in id order after the previous batch's last id (the
-- scan never walks back over rows it already changed), locks them with FOR
-- UPDATE SKIP LOCKED (a row another transaction holds is left alone, not
-- waited for) and re-checks the status on the locked row version: a task
-- that a worker claimed meanwhile is running, and is not touched.
--
-- Requeues one batch of failed (or cancelled) tasks matching the filter:
-- pending, due now, with a history entry that records the requeue. A task
-- waits instead if it has dependencies left, or if another task of its
-- sequence is ahead of it (skiplock_sequence_admits: pending, running,
-- failed and holding, waiting or requeued with it with a smaller id), so
-- that a sequence never has two tasks pending at once, and the first of
-- those requeued together goes first. Without
-- reset_attempts a task keeps its attempt count and gets at least one more
-- attempt; with it, its attempts start again from zero. Idle workers of each
-- requeued queue are woken (delivered at commit, that is at the end of the
-- statement). The caller loops with after_id = last_id while picked equals
-- batch_size.
WITH picked AS MATERIALIZED (
    SELECT t.id
    FROM skiplock_tasks AS t
    WHERE t.status = ANY(@statuses::text[])
      AND t.id > @after_id::bigint
      AND (cardinality(@queues::text[]) = 0 OR t.queue = ANY(@queues::text[]))
      AND (cardinality(@names::text[]) = 0 OR t.name = ANY(@names::text[]))
      AND (sqlc.narg(since)::timestamptz IS NULL OR coalesce(t.finished_at, t.created_at) >= sqlc.narg(since)::timestamptz)
      AND (sqlc.narg(finished_before)::timestamptz IS NULL OR t.finished_at < sqlc.narg(finished_before)::timestamptz)
      AND (sqlc.narg(error_contains)::text IS NULL
           OR strpos(lower(t.errors -> -1 ->> 'error'), lower(sqlc.narg(error_contains)::text)) > 0)
    ORDER BY t.id
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
), requeued AS (
    UPDATE skiplock_tasks AS t
    SET status = CASE WHEN t.deps_pending > 0 THEN 'waiting'
                      WHEN t.sequence_key IS NOT NULL
                           AND NOT skiplock_sequence_admits(t.sequence_key, t.id, (SELECT array_agg(p.id) FROM picked AS p)) THEN 'waiting'
                      ELSE 'pending' END,
        run_at = now(),
        finished_at = NULL,
        worker_id = NULL,
        attempt = CASE WHEN @reset_attempts::boolean THEN 0 ELSE t.attempt END,
        crashes = 0,
        max_attempts = CASE WHEN @reset_attempts::boolean THEN t.max_attempts ELSE greatest(t.max_attempts, t.attempt + 1) END,
        errors = t.errors || jsonb_build_array(jsonb_build_object(
            'attempt', t.attempt,
            'outcome', 'requeued',
            'error', @reason::text,
            'finished_at', now()
        ))
    FROM picked
    WHERE t.id = picked.id
      AND t.status = ANY(@statuses::text[])
      AND t.status IN ('failed', 'cancelled')
    RETURNING t.id, t.queue
), notified AS (
    SELECT pg_notify(@channel::text, q.queue)
    FROM (SELECT DISTINCT requeued.queue FROM requeued) AS q
)
SELECT (SELECT count(*) FROM picked)::bigint AS picked,
       (SELECT coalesce(max(picked.id), 0) FROM picked)::bigint AS last_id,
       (SELECT count(*) FROM requeued)::bigint AS requeued,
       (SELECT count(*) FROM notified)::bigint AS queues_notified;

-- name: TaskRequeueMany :one
-- Requeues the named tasks that are failed (or cancelled), as
-- TaskRequeueBatch does. Named tasks are waited for, not skipped, when
-- another transaction holds them, and locked in id order.
WITH picked AS MATERIALIZED (
    SELECT t.id
    FROM skiplock_tasks AS t
    WHERE t.id = ANY(@ids::bigint[])
      AND t.status = ANY(@statuses::text[])
    ORDER BY t.id
    FOR UPDATE
), requeued AS (
    UPDATE skiplock_tasks AS t
    SET status = CASE WHEN t.deps_pending > 0 THEN 'waiting'
                      WHEN t.sequence_key IS NOT NULL
                           AND NOT skiplock_sequence_admits(t.sequence_key, t.id, (SELECT array_agg(p.id) FROM picked AS p)) THEN 'waiting'
                      ELSE 'pending' END,
        run_at = now(),
        finished_at = NULL,
        worker_id = NULL,
        attempt = CASE WHEN @reset_attempts::boolean THEN 0 ELSE t.attempt END,
        crashes = 0,
        max_attempts = CASE WHEN @reset_attempts::boolean THEN t.max_attempts ELSE greatest(t.max_attempts, t.attempt + 1) END,
        errors = t.errors || jsonb_build_array(jsonb_build_object(
            'attempt', t.attempt,
            'outcome', 'requeued',
            'error', @reason::text,
            'finished_at', now()
        ))
    FROM picked
    WHERE t.id = picked.id
      AND t.status = ANY(@statuses::text[])
      AND t.status IN ('failed', 'cancelled')
    RETURNING t.id, t.queue
), notified AS (
    SELECT pg_notify(@channel::text, q.queue)
    FROM (SELECT DISTINCT requeued.queue FROM requeued) AS q
)
SELECT coalesce((SELECT array_agg(requeued.id ORDER BY requeued.id) FROM requeued), '{}')::bigint[] AS ids,
       (SELECT count(*) FROM notified)::bigint AS queues_notified;

-- name: TaskCancelBatch :one
-- Cancels one batch of pending, waiting or failed tasks matching the filter. Running
-- tasks are never touched: they are not in the statuses a cancel accepts,
-- and a task claimed after the scan fails the re-check. Loop as with
-- TaskRequeueBatch.
WITH picked AS MATERIALIZED (
    SELECT t.id
    FROM skiplock_tasks AS t
    WHERE t.status = ANY(@statuses::text[])
      AND t.id > @after_id::bigint
      AND (cardinality(@queues::text[]) = 0 OR t.queue = ANY(@queues::text[]))
      AND (cardinality(@names::text[]) = 0 OR t.name = ANY(@names::text[]))
      AND (sqlc.narg(since)::timestamptz IS NULL OR coalesce(t.finished_at, t.created_at) >= sqlc.narg(since)::timestamptz)
      AND (sqlc.narg(finished_before)::timestamptz IS NULL OR t.finished_at < sqlc.narg(finished_before)::timestamptz)
      AND (sqlc.narg(error_contains)::text IS NULL
           OR strpos(lower(t.errors -> -1 ->> 'error'), lower(sqlc.narg(error_contains)::text)) > 0)
    ORDER BY t.id
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE skiplock_tasks AS t
    SET status = 'cancelled',
        finished_at = now()
    FROM picked
    WHERE t.id = picked.id
      AND t.status = ANY(@statuses::text[])
      AND t.status IN ('pending', 'waiting', 'failed')
    RETURNING t.id
)
SELECT (SELECT count(*) FROM picked)::bigint AS picked,
       (SELECT coalesce(max(picked.id), 0) FROM picked)::bigint AS last_id,
       (SELECT count(*) FROM cancelled)::bigint AS cancelled;

-- name: TaskCancelMany :many
-- Cancels the named tasks that are pending, waiting or failed, waiting for (not
-- skipping) rows another transaction holds: a worker's claim holds a row for
-- one statement, after which the task is running and is left alone.
WITH picked AS MATERIALIZED (
    SELECT t.id
    FROM skiplock_tasks AS t
    WHERE t.id = ANY(@ids::bigint[])
      AND t.status = ANY(@statuses::text[])
    ORDER BY t.id
    FOR UPDATE
)
UPDATE skiplock_tasks AS t
SET status = 'cancelled',
    finished_at = now()
FROM picked
WHERE t.id = picked.id
  AND t.status = ANY(@statuses::text[])
  AND t.status IN ('pending', 'waiting', 'failed')
RETURNING t.id;

-- name: TaskPurgeBatch :one
-- Deletes one batch of finished tasks (completed, failed, cancelled; never
-- pending or running, whatever the caller asks) that finished before
-- finished_before and match the filter. Loop as with TaskRequeueBatch.
WITH picked AS MATERIALIZED (
    SELECT t.id
    FROM skiplock_tasks AS t
    WHERE t.status = ANY(@statuses::text[])
      AND t.finished_at < @finished_before::timestamptz
      AND t.id > @after_id::bigint
      AND (cardinality(@queues::text[]) = 0 OR t.queue = ANY(@queues::text[]))
      AND (cardinality(@names::text[]) = 0 OR t.name = ANY(@names::text[]))
      AND (sqlc.narg(since)::timestamptz IS NULL OR t.finished_at >= sqlc.narg(since)::timestamptz)
      AND (sqlc.narg(error_contains)::text IS NULL
           OR strpos(lower(t.errors -> -1 ->> 'error'), lower(sqlc.narg(error_contains)::text)) > 0)
    ORDER BY t.id
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM skiplock_tasks AS t
    USING picked
    WHERE t.id = picked.id
      AND t.status = ANY(@statuses::text[])
      AND t.status IN ('completed', 'failed', 'cancelled')
    RETURNING t.id
)
SELECT (SELECT count(*) FROM picked)::bigint AS picked,
       (SELECT coalesce(max(picked.id), 0) FROM picked)::bigint AS last_id,
       (SELECT count(*) FROM deleted)::bigint AS deleted;

-- name: QueueStats :many
-- Counts per queue and status, the age of the oldest due pending task, and
-- tasks finished over the last 1, 5 and 15 minutes. One pass over the table;
-- paused queues without tasks are listed too. The rates count the finished
-- rows still stored: a purge of recent tasks lowers them.
WITH counts AS (
    SELECT t.queue,
           count(*) FILTER (WHERE t.status = 'pending') AS pending,
           count(*) FILTER (WHERE t.status = 'pending' AND t.run_at <= now()) AS due,
           count(*) FILTER (WHERE t.status = 'pending' AND t.run_at > now() AND t.attempt > 0) AS retrying,
           count(*) FILTER (WHERE t.status = 'pending' AND t.run_at > now() AND t.attempt = 0) AS scheduled,
           count(*) FILTER (WHERE t.status = 'running') AS running,
           count(*) FILTER (WHERE t.status = 'completed') AS completed,
           count(*) FILTER (WHERE t.status = 'failed') AS failed,
           count(*) FILTER (WHERE t.status = 'cancelled') AS cancelled,
           extract(epoch FROM now() - min(t.run_at) FILTER (WHERE t.status = 'pending' AND t.run_at <= now())) AS oldest_due_seconds,
           count(*) FILTER (WHERE t.status = 'completed' AND t.finished_at >= now() - interval '1 minute') AS completed_1m,
           count(*) FILTER (WHERE t.status = 'completed' AND t.finished_at >= now() - interval '5 minutes') AS completed_5m,
           count(*) FILTER (WHERE t.status = 'completed' AND t.finished_at >= now() - interval '15 minutes') AS completed_15m,
           count(*) FILTER (WHERE t.status = 'failed' AND t.finished_at >= now() - interval '1 minute') AS failed_1m,
           count(*) FILTER (WHERE t.status = 'failed' AND t.finished_at >= now() - interval '5 minutes') AS failed_5m,
           count(*) FILTER (WHERE t.status = 'failed' AND t.finished_at >= now() - interval '15 minutes') AS failed_15m
    FROM skiplock_tasks AS t
    GROUP BY t.queue
)
SELECT coalesce(c.queue, q.name)::text AS queue,
       coalesce(c.pending, 0)::bigint AS pending,
       coalesce(c.due, 0)::bigint AS due,
       coalesce(c.retrying, 0)::bigint AS retrying,
       coalesce(c.scheduled, 0)::bigint AS scheduled,
       coalesce(c.running, 0)::bigint AS running,
       coalesce(c.completed, 0)::bigint AS completed,
       coalesce(c.failed, 0)::bigint AS failed,
       coalesce(c.cancelled, 0)::bigint AS cancelled,
       coalesce(c.oldest_due_seconds, 0)::float8 AS oldest_due_seconds,
       coalesce(c.completed_1m, 0)::bigint AS completed_1m,
       coalesce(c.completed_5m, 0)::bigint AS completed_5m,
       coalesce(c.completed_15m, 0)::bigint AS completed_15m,
       coalesce(c.failed_1m, 0)::bigint AS failed_1m,
       coalesce(c.failed_5m, 0)::bigint AS failed_5m,
       coalesce(c.failed_15m, 0)::bigint AS failed_15m,
       q.paused_at
FROM counts AS c
FULL JOIN skiplock_queues AS q ON q.name = c.queue
WHERE c.queue IS NOT NULL OR q.paused_at IS NOT NULL
ORDER BY 1;

-- name: QueueList :many
-- Every known queue: one that has tasks, in any status, or a row in
-- skiplock_queues (it was paused once). It reads only indexes whose size is
-- the backlog, plus one probe of the finished index per queue and finished
-- status (a loose index scan), so it is cheap enough for every dashboard
-- refresh and metrics scrape. Pending tasks are split into due, retrying
-- (attempt > 0, waiting out a backoff) and scheduled (attempt 0, run_at
-- ahead).
WITH RECURSIVE finished AS (
    SELECT s.status,
           (SELECT t.queue
            FROM skiplock_tasks AS t
            WHERE t.status IN ('completed', 'failed', 'cancelled') AND t.status = s.status
            ORDER BY t.queue
            LIMIT 1) AS queue
    FROM (SELECT unnest('{completed,failed,cancelled}'::text[]) AS status) AS s
    UNION ALL
    SELECT f.status,
           (SELECT t.queue
            FROM skiplock_tasks AS t
            WHERE t.status IN ('completed', 'failed', 'cancelled') AND t.status = f.status AND t.queue > f.queue
            ORDER BY t.queue
            LIMIT 1)
    FROM finished AS f
    WHERE f.queue IS NOT NULL
), pending AS (
    SELECT t.queue,
           count(*) AS pending,
           count(*) FILTER (WHERE t.run_at <= now()) AS due,
           count(*) FILTER (WHERE t.run_at > now() AND t.attempt > 0) AS retrying,
           count(*) FILTER (WHERE t.run_at > now() AND t.attempt = 0) AS scheduled,
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
    SELECT finished.queue FROM finished WHERE finished.queue IS NOT NULL
    UNION SELECT pending.queue FROM pending
    UNION SELECT running.queue FROM running
    UNION SELECT q.name FROM skiplock_queues AS q
)
SELECT queues.queue::text AS queue,
       coalesce(pending.pending, 0)::bigint AS pending,
       coalesce(pending.due, 0)::bigint AS due,
       coalesce(pending.retrying, 0)::bigint AS retrying,
       coalesce(pending.scheduled, 0)::bigint AS scheduled,
       coalesce(extract(epoch FROM now() - pending.oldest_due), 0)::float8 AS oldest_due_seconds,
       coalesce(running.running, 0)::bigint AS running,
       coalesce(failed.failed, 0)::bigint AS failed,
       q.paused_at
FROM queues
LEFT JOIN pending ON pending.queue = queues.queue
LEFT JOIN running ON running.queue = queues.queue
LEFT JOIN failed ON failed.queue = queues.queue
LEFT JOIN skiplock_queues AS q ON q.name = queues.queue
ORDER BY queues.queue;

-- name: QueueKnown :one
-- Whether a queue exists: it has a task in any status (each probe reads an
-- index) or a row in skiplock_queues.
SELECT (EXISTS (SELECT 1 FROM skiplock_queues AS q WHERE q.name = @name::text)
        OR EXISTS (SELECT 1 FROM skiplock_tasks AS t WHERE t.status = 'pending' AND t.queue = @name::text)
        OR EXISTS (SELECT 1 FROM skiplock_tasks AS t WHERE t.status = 'running' AND t.queue = @name::text)
        OR EXISTS (SELECT 1 FROM skiplock_tasks AS t
                   WHERE t.status IN ('completed', 'failed', 'cancelled') AND t.queue = @name::text))::boolean AS known;

-- name: TaskNamesRecent :many
-- The task names among the newest max_rows tasks (a range of the primary
-- key, however large the table), for the dashboard's name filter.
SELECT DISTINCT r.name
FROM (SELECT t.name FROM skiplock_tasks AS t ORDER BY t.id DESC LIMIT @max_rows::integer) AS r
ORDER BY r.name;

-- name: TaskRunNowMany :one
-- Makes the named pending tasks that wait for a later run_at (scheduled, or
-- retrying after a backoff) due now, and wakes the workers of their queues.
-- A task a worker claimed meanwhile is running and is left alone.
WITH picked AS MATERIALIZED (
    SELECT t.id
    FROM skiplock_tasks AS t
    WHERE t.id = ANY(@ids::bigint[])
      AND t.status = 'pending'
    ORDER BY t.id
    FOR UPDATE
), moved AS (
    UPDATE skiplock_tasks AS t
    SET run_at = now()
    FROM picked
    WHERE t.id = picked.id
      AND t.status = 'pending'
      AND t.run_at > now()
    RETURNING t.id, t.queue
), notified AS (
    SELECT pg_notify(@channel::text, q.queue)
    FROM (SELECT DISTINCT moved.queue FROM moved) AS q
)
SELECT coalesce((SELECT array_agg(moved.id ORDER BY moved.id) FROM moved), '{}')::bigint[] AS ids,
       (SELECT count(*) FROM notified)::bigint AS queues_notified;

-- name: TaskDeleteMany :many
-- Deletes the named tasks, with their history, unless they are running (a
-- worker holds those; cancel them first). Rows are locked in id order, and a
-- task a worker claimed meanwhile fails the re-check.
WITH picked AS MATERIALIZED (
    SELECT t.id
    FROM skiplock_tasks AS t
    WHERE t.id = ANY(@ids::bigint[])
      AND t.status <> 'running'
    ORDER BY t.id
    FOR UPDATE
)
DELETE FROM skiplock_tasks AS t
USING picked
WHERE t.id = picked.id
  AND t.status <> 'running'
RETURNING t.id;

-- name: PeriodicList :many
-- The periodic schedules that workers have run, with the last tick each
-- enqueued (or, for a new schedule, the tick it started after).
SELECT p.schedule, p.last_tick, p.updated_at
FROM skiplock_periodic AS p
ORDER BY p.schedule;

-- name: RateLimitList :many
-- The shared rate limits that workers have used: the current fixed window
-- of each and how much of it claims have taken.
SELECT r.key, r.window_start, r.used, r.last_granted
FROM skiplock_rate_limits AS r
ORDER BY r.key;

-- name: RateKeyList :many
-- The per-key rate limits (worker.RateLimit with PerKey) with a window
-- open now: how many keys have one, what those windows have taken, all
-- keys together, and the busiest keys, most used first.
SELECT s.scope, s.keys, s.used, s.window_start, b.busiest_keys, b.busiest_used
FROM (
    SELECT r.scope, count(*)::bigint AS keys, sum(r.used)::bigint AS used, max(r.window_start)::timestamptz AS window_start
    FROM skiplock_rate_keys AS r
    WHERE r.window_end > clock_timestamp()
    GROUP BY r.scope
) AS s
CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(t.key ORDER BY t.used DESC, t.key), '{}')::text[] AS busiest_keys,
           coalesce(array_agg(t.used ORDER BY t.used DESC, t.key), '{}')::integer[] AS busiest_used
    FROM (
        SELECT k.key, k.used
        FROM skiplock_rate_keys AS k
        WHERE k.scope = s.scope AND k.window_end > clock_timestamp()
        ORDER BY k.used DESC, k.key
        LIMIT @busiest::integer
    ) AS t
) AS b
ORDER BY s.scope;

-- name: LockList :many
-- Who holds which task lock: the advisory locks of lock class
-- lock_class_oid in this database, with the running task each one guards,
-- the session that holds it and the worker that registered that session.
-- Every source is materialized and joined on equality, so the joins hash:
-- pg_locks and pg_stat_activity have no statistics, and a nested loop over
-- them costs seconds with thousands of running tasks (see TaskRescueOrphans).
-- task_id 0 lists every lock.
WITH held AS MATERIALIZED (
    SELECT l.pid, l.objid::bigint AS key
    FROM pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory'
      AND l.objsubid = 2
      AND l.granted
      AND l.classid::bigint = @lock_class_oid::bigint
      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
      AND (@task_id::bigint = 0 OR l.objid::bigint = mod(@task_id::bigint, 4294967296))
), running AS MATERIALIZED (
    SELECT r.id, r.id % 4294967296 AS key, r.queue, r.name, r.attempt, r.worker_id, r.started_at
    FROM skiplock_tasks AS r
    WHERE r.status = 'running'
      AND (@task_id::bigint = 0 OR r.id = @task_id::bigint)
), sessions AS MATERIALIZED (
    SELECT a.pid, host(a.client_addr) AS client_addr, a.application_name, a.backend_start
    FROM pg_catalog.pg_stat_activity AS a
)
SELECT held.pid::integer AS pid,
       held.key,
       running.id AS task_id,
       running.queue,
       running.name,
       running.attempt,
       running.worker_id AS task_worker_id,
       running.started_at,
       coalesce(extract(epoch FROM now() - running.started_at), 0)::float8 AS held_seconds,
       coalesce(sessions.client_addr, '')::text AS client_addr,
       coalesce(sessions.application_name, '')::text AS application_name,
       w.id AS worker_id,
       w.host AS worker_host,
       w.pid AS worker_pid
FROM held
LEFT JOIN running ON running.key = held.key
LEFT JOIN sessions ON sessions.pid = held.pid
LEFT JOIN skiplock_workers AS w ON w.lock_backend_pid = held.pid
ORDER BY running.started_at NULLS LAST, held.key;

-- name: LockWaitList :many
-- Sessions of this database waiting for a lock, and the sessions blocking
-- them (pg_blocking_pids), as PostgreSQL's lock monitoring queries show them.
SELECT a.pid::integer AS pid,
       coalesce(host(a.client_addr), '')::text AS client_addr,
       coalesce(a.application_name, '')::text AS application_name,
       coalesce(a.wait_event, '')::text AS wait_event,
       pg_catalog.pg_blocking_pids(a.pid)::integer[] AS blocked_by,
       coalesce(extract(epoch FROM now() - coalesce(a.state_change, a.query_start)), 0)::float8 AS waiting_seconds,
       left(coalesce(a.query, ''), 200)::text AS query
FROM pg_catalog.pg_stat_activity AS a
WHERE a.datname = current_database()
  AND a.wait_event_type = 'Lock'
  AND cardinality(pg_catalog.pg_blocking_pids(a.pid)) > 0
ORDER BY waiting_seconds DESC, a.pid;
