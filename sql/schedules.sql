-- Periodic schedules stored in the database (queue.Client.AddSchedule and
-- the rest): operators write them, the elected scheduler reads them. The
-- last tick of each is in skiplock_periodic under its name (flow.sql).

-- name: ScheduleCreate :execrows
-- Adds a schedule; 0 rows when one of that name exists.
INSERT INTO skiplock_schedules (name, cron, every_ms, task_name, payload, options, catch_up, paused_at)
VALUES (@name::text, sqlc.narg(cron)::text, sqlc.narg(every_ms)::bigint, @task_name::text, @payload::jsonb,
        @options::jsonb, @catch_up::boolean, CASE WHEN @paused::boolean THEN now() END)
ON CONFLICT (name) DO NOTHING;

-- name: ScheduleUpdate :execrows
-- Replaces a schedule's spec, task and options, keeping its pause; 0 rows
-- when there is none of that name.
UPDATE skiplock_schedules
SET cron = sqlc.narg(cron)::text, every_ms = sqlc.narg(every_ms)::bigint, task_name = @task_name::text,
    payload = @payload::jsonb, options = @options::jsonb, catch_up = @catch_up::boolean, updated_at = now()
WHERE name = @name::text;

-- name: SchedulePause :execrows
UPDATE skiplock_schedules
SET paused_at = coalesce(paused_at, now()), updated_at = now()
WHERE name = @name::text;

-- name: ScheduleResume :execrows
UPDATE skiplock_schedules
SET paused_at = NULL, updated_at = now()
WHERE name = @name::text;

-- name: ScheduleDelete :execrows
DELETE FROM skiplock_schedules WHERE name = @name::text;

-- name: ScheduleGet :one
SELECT s.name, s.cron, s.every_ms, s.task_name, s.payload, s.options, s.catch_up, s.paused_at,
       s.created_at, s.updated_at, p.last_tick
FROM skiplock_schedules AS s
LEFT JOIN skiplock_periodic AS p ON p.schedule = s.name
WHERE s.name = @name::text;

-- name: ScheduleList :many
-- Every stored schedule by name, with its last tick (NULL before the
-- scheduler first saw it).
SELECT s.name, s.cron, s.every_ms, s.task_name, s.payload, s.options, s.catch_up, s.paused_at,
       s.created_at, s.updated_at, p.last_tick
FROM skiplock_schedules AS s
LEFT JOIN skiplock_periodic AS p ON p.schedule = s.name
ORDER BY s.name;
