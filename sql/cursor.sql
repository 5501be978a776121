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
