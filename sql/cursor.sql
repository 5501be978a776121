-- name: TaskPendingBefore :many
-- The first claimable row of a queue that sorts before a position in claim
-- order (a claim cursor's), or none. Read without any lock, on a pool
-- connection, never on the lock session: while the head of the claim index
-- is expensive to walk (the entries of claimed rows that vacuum cannot
-- remove yet), this walk runs beside the claims instead of holding them up,
-- and the claim that follows starts at the row it found. It has the
-- claim's filters but not its exclusive-key and limit checks: a row it
-- finds may still be passed over, at the cost of one claim that starts
-- there.
SELECT p.priority, p.run_at, p.id
FROM skiplock_tasks AS p
WHERE p.status = 'pending'
  AND p.queue = @queue::text
  AND p.run_at <= now()
  AND (cardinality(@only_names::text[]) = 0 OR p.name = ANY(@only_names::text[]))
  AND NOT (p.name = ANY(@skip_names::text[]))
  AND p.crashes = 0
  AND (p.priority, p.run_at, p.id) < (@before_priority::smallint, @before_run_at::timestamptz, @before_id::bigint)
ORDER BY p.priority, p.run_at, p.id
LIMIT 1;

-- name: TaskPendingLast :one
-- The last pending row of a queue in claim order that is due, read from the
-- tail of the claim index, without any lock, on a pool connection. A claim
-- from the head that walked a long run of rows it may not take (names that
-- the worker has no handler for) and took nothing carries its cursor here,
-- so that the next claims start past that run instead of walking it again
-- (worker/cursor.go).
SELECT p.priority, p.run_at, p.id
FROM skiplock_tasks AS p
WHERE p.status = 'pending'
  AND p.queue = @queue::text
  AND p.run_at <= now()
ORDER BY p.priority DESC, p.run_at DESC, p.id DESC
LIMIT 1;

-- name: TaskUnhandledHead :many
-- The names, among the first scan rows due of a queue in claim order, that
-- the worker has no handler for (handled): what the worker logs once, so
-- that a name no running worker handles is seen. It reads at most scan
-- rows, whatever the backlog's size.
SELECT DISTINCT h.name::text AS name
FROM (
    SELECT p.name
    FROM skiplock_tasks AS p
    WHERE p.status = 'pending'
      AND p.queue = @queue::text
      AND p.run_at <= now()
    ORDER BY p.priority, p.run_at, p.id
    LIMIT @scan::integer
) AS h
WHERE NOT (h.name = ANY(@handled::text[]))
ORDER BY 1;
