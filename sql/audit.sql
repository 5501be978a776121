-- name: AuditRecord :exec
-- Records an operator change that is done (made in this transaction).
-- db_role and at take their defaults. No RETURNING: a role that may only
-- append records (a producer's INSERT on the listed columns) needs no
-- SELECT on the trail to write one.
INSERT INTO skiplock_audit (actor, source, action, request, affected, finished_at)
VALUES (@actor::text, @source::text, @action::text, @request::jsonb, @affected::bigint, now());

-- name: AuditBegin :one
-- Records a batched change before its first batch, unfinished; its row's
-- AuditProgress and AuditFinish complete it. db_role and at take their
-- defaults.
INSERT INTO skiplock_audit (actor, source, action, request)
VALUES (@actor::text, @source::text, @action::text, @request::jsonb)
RETURNING id;

-- name: AuditProgress :exec
-- Adds a committed batch's count to a batched change's row, in the batch's
-- transaction.
UPDATE skiplock_audit SET affected = affected + @added::bigint WHERE id = @id::bigint;

-- name: AuditFinish :exec
-- Ends a batched change's row, with the error it stopped on, if any.
UPDATE skiplock_audit SET finished_at = now(), error = sqlc.narg(error)::text WHERE id = @id::bigint;

-- name: AuditList :many
-- The newest records first (by id: the order they were made in), keyset
-- paged with before_id, filtered by time, action, actor and source.
SELECT id, at, actor, db_role, source, action, request, affected, finished_at, error
FROM skiplock_audit
WHERE (sqlc.narg(since)::timestamptz IS NULL OR at >= sqlc.narg(since)::timestamptz)
  AND (sqlc.narg(action)::text IS NULL OR action = sqlc.narg(action)::text)
  AND (sqlc.narg(actor)::text IS NULL OR actor = sqlc.narg(actor)::text)
  AND (sqlc.narg(source)::text IS NULL OR source = sqlc.narg(source)::text)
  AND (sqlc.narg(before_id)::bigint IS NULL OR id < sqlc.narg(before_id)::bigint)
ORDER BY id DESC
LIMIT @max_rows::integer;

-- name: AuditPurge :execrows
-- Deletes one batch of records older than the retention, for the elected
-- worker, oldest first.
DELETE FROM skiplock_audit
WHERE id IN (
    SELECT a.id
    FROM skiplock_audit AS a
    WHERE a.at < now() - make_interval(secs => @older_than_seconds::double precision)
    ORDER BY a.at
    LIMIT @batch_size::integer
);
