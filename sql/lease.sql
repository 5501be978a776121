-- name: TaskLeaseRenew :many
-- Extends the leases of a worker's running tasks; a task missing from the
-- result is no longer this worker's (its lease expired and it was rescued).
UPDATE skiplock_tasks AS t
SET locked_until = now() + interval '1 millisecond' * @lease_ms::bigint
FROM (
    SELECT unnest(@ids::bigint[])               AS id,
           unnest(@attempts::integer[])         AS attempt,
           'epoch'::timestamptz + unnest(@claimed_us::bigint[]) * interval '1 microsecond' AS started_at
) AS u
WHERE t.id = u.id
  AND t.attempt = u.attempt
  AND t.started_at = u.started_at
  AND t.status = 'running'
  AND t.worker_id = @worker_id::text
  AND t.locked_until IS NOT NULL
RETURNING t.id;

-- name: LeaderLeaseAcquire :execrows
-- Takes or renews the lease on a maintenance job: granted to its holder
-- again, or to anyone once it expired. One row affected: this process leads.
INSERT INTO skiplock_leaders AS l (job, holder, expires_at)
VALUES (@job::text, @holder::text, now() + interval '1 millisecond' * @ttl_ms::bigint)
ON CONFLICT (job) DO UPDATE
SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE l.holder = excluded.holder OR l.expires_at < now();

-- name: LeaderLeaseRelease :exec
DELETE FROM skiplock_leaders WHERE job = @job::text AND holder = @holder::text;
