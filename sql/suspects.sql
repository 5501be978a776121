-- name: TaskSuspectNext :one
-- The next suspect this worker may run alone (worker/isolate.go): a
-- pending task with crashes > 0 (it was running when a worker process
-- died; see TaskRescueOrphans), due, of one of the worker's queues that is
-- not paused and with a name it handles, in claim order. Read without a
-- lock: the claim by id that follows (TaskClaim's only_ids) is the one
-- that takes it, or finds it gone. There is no index on crashes: this
-- walks the claim index of those queues, and runs only while the worker
-- has been told that suspects exist (a rescue that made one notifies the
-- workers), not per claim.
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
