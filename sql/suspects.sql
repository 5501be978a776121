-- name: TaskSuspectNext :one
-- The next suspect this worker may run alone (worker/isolate.go): a
-- pending task with crashes > 0 (it was running when a worker process
-- died; see TaskRescueOrphans), due, of one of the worker's queues that is
-- not paused and with a name it handles, in claim order. Read without a
-- lock: the claim by id that follows (TaskClaim's only_ids) is the one
-- that takes it, or finds it gone. It reads the suspect index, which
-- holds suspects only, and runs only while the worker has been told that
-- suspects may exist (a rescue that made one notifies the workers), not
-- per claim.
SELECT p.id, p.queue, p.name
FROM skiplock_tasks AS p
WHERE p.status = 'pending'
  AND p.queue = ANY(@queues::text[])
  AND p.name = ANY(@names::text[])
  AND p.run_at <= now()
  AND p.crashes > 0
  AND NOT EXISTS (SELECT 1 FROM skiplock_queues AS q WHERE q.name = p.queue AND q.paused_at IS NOT NULL)
ORDER BY p.priority, p.run_at, p.id
LIMIT 1;

-- name: TaskSuspectsRecount :execrows
-- Recounts the crashes of the pending suspects of the given queues, as
-- TaskRescueOrphans counts them, before the isolator looks for one to run
-- alone: a death whose process has been heard from since (a worker cut off
-- by a silent network, whose session the rescuer ended, that came back)
-- no longer counts, and a task left with none is no suspect any more, so
-- the ordinary claims take it again. Like TaskSuspectNext it reads the
-- suspect index, and only while suspects may exist.
UPDATE skiplock_tasks AS t
SET crashes = c.n
FROM (
    SELECT p.id, (
        SELECT count(*)::integer
        FROM jsonb_array_elements(p.errors) AS e(entry)
        WHERE e.entry ->> 'outcome' = 'rescued'
          AND e.entry ? 'crash'
          AND e.entry -> 'crash' <> 'false'::jsonb
          AND NOT EXISTS (
              SELECT 1 FROM skiplock_workers AS h
              WHERE h.id = e.entry ->> 'worker_id'
                AND h.started_at = (e.entry ->> 'worker_started_at')::timestamptz
                AND h.heartbeat_at > (e.entry ->> 'finished_at')::timestamptz)
    ) AS n
    FROM skiplock_tasks AS p
    WHERE p.status = 'pending'
      AND p.queue = ANY(@queues::text[])
      AND p.crashes > 0
) AS c
WHERE t.id = c.id
  AND t.status = 'pending'
  AND t.crashes > c.n;

-- name: IsolationTurnTake :execrows
-- Takes or renews the isolation turn (worker/isolate.go): the one worker
-- at a time that runs suspects alone. As LeaderLeaseAcquire, but a turn
-- whose holder's lock session is gone (advisory mode: its registered
-- backend is no longer in pg_stat_activity; it died, likely while running a
-- suspect) is taken over at once rather than when it expires. Should the
-- holder only have lost its session, two workers each run a suspect alone
-- for a while, which costs capacity, not the count: a death is counted
-- per process.
INSERT INTO skiplock_leaders AS l (job, holder, expires_at)
VALUES ('isolation', @holder::text, now() + interval '1 millisecond' * @ttl_ms::bigint)
ON CONFLICT (job) DO UPDATE
SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE l.holder = excluded.holder
   OR l.expires_at < now()
   OR EXISTS (SELECT 1 FROM skiplock_workers AS w
              WHERE w.id = l.holder
                AND w.lock_backend_pid IS NOT NULL AND w.lock_backend_pid <> 0
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity AS a WHERE a.pid = w.lock_backend_pid));
