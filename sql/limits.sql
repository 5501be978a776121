-- name: LimitSet :exec
-- Sets a concurrency limit, cluster-wide: kind 'queue' (target a queue),
-- 'name' (a task name) or 'key' (a pattern of limit keys, '*' a wildcard,
-- each matching key limited on its own).
INSERT INTO skiplock_limits (kind, target, max_running) VALUES (@kind::text, @target::text, @max_running::integer)
ON CONFLICT (kind, target) DO UPDATE SET max_running = excluded.max_running, updated_at = now();

-- name: LimitDelete :execrows
DELETE FROM skiplock_limits WHERE kind = @kind::text AND target = @target::text;

-- name: LimitList :many
-- Every limit with how many of its tasks run now (for a key pattern: the
-- running tasks of all matching keys together, and the busiest key's).
SELECT m.kind, m.target, m.max_running, m.updated_at,
       coalesce(r.running, 0)::bigint AS running,
       coalesce(r.busiest, 0)::bigint AS busiest
FROM skiplock_limits AS m
LEFT JOIN LATERAL (
    SELECT sum(c.n)::bigint AS running, max(c.n)::bigint AS busiest
    FROM (
        SELECT count(*) AS n
        FROM skiplock_tasks AS t
        WHERE t.status = 'running'
          AND CASE m.kind WHEN 'queue' THEN t.queue = m.target
                          WHEN 'name' THEN t.name = m.target
                          ELSE t.limit_key LIKE m.pattern END
        GROUP BY CASE WHEN m.kind = 'key' THEN t.limit_key END
    ) AS c
) AS r ON true
ORDER BY m.kind, m.target;

-- name: LimitsExist :one
-- Whether any concurrency limit exists, and whether any is not a queue's
-- (the claim statement a worker uses depends on it).
SELECT EXISTS (SELECT 1 FROM skiplock_limits)::boolean AS present,
       EXISTS (SELECT 1 FROM skiplock_limits WHERE kind <> 'queue')::boolean AS beyond_queues;

-- name: LimitLockClass :one
-- The first key of every limit slot lock: skiplock_limits' OID. NULL
-- before migration 10.
SELECT coalesce(to_regclass('skiplock_limits')::oid::bigint, 0)::bigint AS oid;

-- name: LimitLockForClaim :one
-- Lease mode: takes, in a fixed order, the transaction locks of every limit
-- a claim of the queue may meet (its queue's, every name and key limit),
-- so that the claim statement after it in the same transaction counts the
-- running tasks of each with no other claimer in between. The bigint form
-- (limit class in the high half) never meets a slot lock (two-int form).
SELECT count(*)::bigint AS locked
FROM (
    SELECT pg_advisory_xact_lock((@limit_class::bigint << 32) | (hashtext(s.kind || ':' || s.target)::bigint & 4294967295))
    FROM (
        SELECT m.kind, m.target FROM skiplock_limits AS m
        WHERE (m.kind = 'queue' AND m.target = @queue::text) OR m.kind IN ('name', 'key')
        ORDER BY m.kind, m.target
        OFFSET 0
    ) AS s
) AS l;

-- name: LimitLocksHeld :many
-- The limit slot locks this session holds, to reconcile after a failed
-- claim (session locks outlive the rollback of the statement that took
-- them), one row per time taken.
SELECT l.objid::bigint AS key
FROM pg_catalog.pg_locks AS l
WHERE l.locktype = 'advisory'
  AND l.objsubid = 2
  AND l.classid::bigint = @limit_class_oid::bigint
  AND l.pid = pg_backend_pid();
