-- name: WorkerRegister :exec
-- In advisory mode it runs on the lock session itself, so that heartbeat_at
-- is a moment when lock_backend_pid was that session (see
-- WorkerTerminateStale). names are the task names the worker has handlers
-- for (NULL: unknown, as a worker built before the column records it).
-- A process's first registration (new_process) sets started_at, host and
-- pid, also over the row of an earlier process that had the same worker
-- id: started_at then tells the processes apart, and the rescue counts a
-- death only for a process gone (TaskRescueOrphans); a re-registration
-- after a lost lock session keeps them.
INSERT INTO skiplock_workers (id, host, pid, queues, lock_backend_pid, names)
VALUES (@id::text, @host::text, @pid::integer, @queues::text[], @lock_backend_pid::integer, sqlc.narg(names)::text[])
ON CONFLICT (id) DO UPDATE
SET lock_backend_pid = excluded.lock_backend_pid, heartbeat_at = now(), names = excluded.names,
    started_at = CASE WHEN @new_process::boolean THEN now() ELSE skiplock_workers.started_at END,
    host = CASE WHEN @new_process::boolean THEN excluded.host ELSE skiplock_workers.host END,
    pid = CASE WHEN @new_process::boolean THEN excluded.pid ELSE skiplock_workers.pid END;

-- name: WorkerHeartbeat :exec
UPDATE skiplock_workers SET heartbeat_at = now() WHERE id = @id::text;

-- name: WorkerSessionHeartbeat :execrows
-- The advisory-mode heartbeat, written through the lock session: only a
-- session that still answers can keep it fresh, so a worker cut off from
-- the database cannot, whatever else of it still runs.
-- It commits without waiting for its WAL to reach disk (a heartbeat lost in
-- a crash is worth nothing anyway), so that a server busy flushing does not
-- make a live worker look cut off.
WITH async AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
UPDATE skiplock_workers SET heartbeat_at = now()
WHERE id = @id::text AND lock_backend_pid = pg_backend_pid()
  AND (SELECT async.setting FROM async) IS NOT NULL;

-- name: WorkerTerminateStale :many
-- Ends the lock sessions of workers whose heartbeat is older than
-- stale_seconds: a session cut off by a silent network stays alive on the
-- server, holding its task locks (and maybe an election), until TCP gives
-- up. With leader_key <> 0 only the session holding that election lock is
-- considered. A pid proves to be the worker's session when its backend
-- started no later than the worker's last heartbeat, which that session
-- wrote: pids are unique among live processes, so a reused pid belongs to a
-- backend that started later. Sessions this role may not end (another role's
-- without pg_signal_backend, a superuser's, or any whose backend_start it
-- cannot see: another role's without pg_read_all_stats) come back with
-- permitted = false, and their role, and are left alone. Privileges are
-- those the role has (pg_has_role USAGE), as pg_terminate_backend checks
-- them: a membership without INHERIT does not count.
WITH stale AS MATERIALIZED (
    SELECT w.id, w.lock_backend_pid AS pid, w.heartbeat_at
    FROM skiplock_workers AS w
    WHERE w.lock_backend_pid IS NOT NULL
      AND w.lock_backend_pid <> 0
      AND w.id <> @self::text
      AND w.heartbeat_at < now() - make_interval(secs => @stale_seconds::double precision)
), me AS MATERIALIZED (
    SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user
), sessions AS MATERIALIZED (
    SELECT s.id, a.pid, a.usename AS session_role,
           coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.oid = a.usesysid), false) AS session_superuser,
           a.backend_start IS NOT NULL
             AND ((SELECT me.rolsuper FROM me)
                  OR (NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.oid = a.usesysid), true)
                      AND (pg_catalog.pg_has_role(a.usesysid, 'USAGE')
                           OR pg_catalog.pg_has_role('pg_signal_backend', 'USAGE')))) AS permitted
    FROM stale AS s
    JOIN pg_catalog.pg_stat_activity AS a ON a.pid = s.pid
    WHERE a.datname = current_database()
      AND a.application_name LIKE 'skiplock lock session%'
      AND (a.backend_start IS NULL OR a.backend_start <= s.heartbeat_at)
      AND (@leader_key::bigint = 0 OR a.pid IN (
          SELECT l.pid
          FROM pg_catalog.pg_locks AS l
          WHERE l.locktype = 'advisory'
            AND l.objsubid = 1
            AND l.granted
            AND l.classid::bigint = (@leader_key::bigint >> 32)
            AND l.objid::bigint = (@leader_key::bigint & 4294967295)
            AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())))
)
SELECT sessions.id, sessions.pid::integer AS pid, coalesce(sessions.permitted, false)::boolean AS permitted,
       coalesce(sessions.session_role, '')::text AS session_role, sessions.session_superuser::boolean AS session_superuser,
       current_user::text AS role,
       coalesce(CASE WHEN sessions.permitted THEN pg_catalog.pg_terminate_backend(sessions.pid) END, false)::boolean AS terminated
FROM sessions;

-- name: SessionTune :one
-- Tunes the lock session, and returns the synchronous_commit that its
-- setting here replaces: the server's, which outcome writes keep
-- (HandoffSettings).
--
-- Asks the server to give up on a silent client in seconds: its side of the
-- lock session holds the task locks. Any role may set these; 0 means the
-- operating system's setting, and over a Unix socket they do nothing.
--
-- Its commits do not wait for the WAL flush (synchronous_commit off): the
-- claims are the only writes that matter here, and a claim lost to a
-- server crash is a claim whose locks the crash ended anyway (its task is
-- pending again, attempt not counted, as if the crash came just before
-- it). An outcome is written on another session with the server's
-- setting, and its flush carries the claim's earlier commit record with
-- it: no outcome is ever durable without its claim. The outcome of a lost
-- claim's run, written late, finds the task pending, or claimed again
-- (maybe by this worker, with the same attempt number), and is fenced off
-- by the claim's started_at (TaskFinishMany). The claim, serial on this
-- one session, no longer waits a flush each time.
WITH before AS MATERIALIZED (
    SELECT current_setting('synchronous_commit') AS setting
), tuned AS MATERIALIZED (
    SELECT set_config('tcp_keepalives_idle', @keepalive_idle_seconds::text, false),
           set_config('tcp_keepalives_interval', @keepalive_interval_seconds::text, false),
           set_config('tcp_keepalives_count', @keepalive_count::text, false),
           set_config('tcp_user_timeout', @user_timeout_ms::text, false),
           set_config('synchronous_commit', 'off', false)
    FROM before
)
SELECT b.setting::text AS outcome_commit FROM before AS b, tuned;

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

-- name: WorkflowRetire :execrows
-- Deletes one batch of workflows that have no task left (all retired or
-- deleted) and are older than older_than_seconds, for the elected cleaner.
-- Each probe reads the partial index on workflow_id. A workflow being
-- enqueued is invisible here until its transaction commits with its tasks.
DELETE FROM skiplock_workflows
WHERE id IN (
    SELECT w.id
    FROM skiplock_workflows AS w
    WHERE w.created_at < now() - make_interval(secs => @older_than_seconds::double precision)
      AND NOT EXISTS (SELECT 1 FROM skiplock_tasks AS t WHERE t.workflow_id = w.id)
    ORDER BY w.id
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
);

-- name: BatchRetire :execrows
-- Deletes up to batch_size batches (queue.Client.EnqueueBatch) that have
-- no task left (all retired or deleted) and are older than
-- older_than_seconds, for the elected cleaner. A batch being enqueued is invisible here until its
-- transaction commits with its tasks.
DELETE FROM skiplock_batches
WHERE id IN (
    SELECT b.id
    FROM skiplock_batches AS b
    WHERE b.created_at < now() - make_interval(secs => @older_than_seconds::double precision)
      AND NOT EXISTS (SELECT 1 FROM skiplock_tasks AS t WHERE t.batch_id = b.id)
    ORDER BY b.id
    LIMIT @batch_size::integer
    FOR UPDATE SKIP LOCKED
);

-- name: WorkerSetQueues :exec
-- Records the queues a running worker claims from, after it added or
-- removed one (worker.Worker.AddQueue, RemoveQueue).
UPDATE skiplock_workers SET queues = @queues::text[] WHERE id = @id::text;

-- name: WorkerCountLive :one
-- The workers whose heartbeat is recent: the processes that share the
-- server's lock table with this one, for the in-flight window
-- (worker/window.go).
SELECT count(*)::integer AS live
FROM skiplock_workers
WHERE heartbeat_at > now() - make_interval(secs => @within_seconds::double precision);
