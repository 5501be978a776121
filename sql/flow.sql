-- name: QueuePause :exec
INSERT INTO skiplock_queues (name, paused_at) VALUES (@name::text, now())
ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(skiplock_queues.paused_at, now()), updated_at = now();

-- name: QueueResume :exec
INSERT INTO skiplock_queues (name, paused_at) VALUES (@name::text, NULL)
ON CONFLICT (name) DO UPDATE SET paused_at = NULL, updated_at = now();

-- name: QueueListPaused :many
SELECT name, paused_at FROM skiplock_queues WHERE paused_at IS NOT NULL ORDER BY name;

-- name: RateLimitTake :one
-- Takes up to want of a limit's budget in the current fixed window (on the
-- database clock) and returns how many were granted and the window. The row
-- lock serializes every claimer of the limit; under READ COMMITTED a waiting
-- claimer recomputes the SET list on the row its predecessor committed, so
-- grants never exceed the limit.
INSERT INTO skiplock_rate_limits AS r (key, window_start, used, last_granted)
SELECT sqlc.arg(key)::text, cw.win,
       least(sqlc.arg(want)::integer, sqlc.arg(lim)::integer), least(sqlc.arg(want)::integer, sqlc.arg(lim)::integer)
FROM (SELECT to_timestamp(floor(extract(epoch FROM clock_timestamp()) / sqlc.arg(period_seconds)::float8)
                          * sqlc.arg(period_seconds)::float8) AS win) AS cw
ON CONFLICT (key) DO UPDATE
SET last_granted = greatest(0, least(excluded.used,
        sqlc.arg(lim)::integer - CASE WHEN r.window_start = excluded.window_start THEN r.used ELSE 0 END)),
    used = CASE WHEN r.window_start = excluded.window_start THEN r.used ELSE 0 END
         + greatest(0, least(excluded.used,
        sqlc.arg(lim)::integer - CASE WHEN r.window_start = excluded.window_start THEN r.used ELSE 0 END)),
    window_start = excluded.window_start
RETURNING last_granted, window_start;

-- name: RateLimitGiveBack :exec
-- Returns budget that a claim did not use, if its window is still current.
UPDATE skiplock_rate_limits
SET used = greatest(0, used - @unused::integer)
WHERE key = @key::text AND window_start = @current_window::timestamptz;

-- name: PeriodicLastTick :one
SELECT last_tick FROM skiplock_periodic WHERE schedule = @schedule::text;

-- name: PeriodicSetLastTick :exec
INSERT INTO skiplock_periodic (schedule, last_tick) VALUES (@schedule::text, @last_tick::timestamptz)
ON CONFLICT (schedule) DO UPDATE
SET last_tick = greatest(skiplock_periodic.last_tick, excluded.last_tick), updated_at = now();

-- name: TaskRequestCancel :many
-- Asks the workers running these tasks to cancel them; the caller then
-- notifies the control channel. Returns the tasks that are running.
UPDATE skiplock_tasks
SET cancel_requested_at = coalesce(cancel_requested_at, now())
WHERE id = ANY(@ids::bigint[]) AND status = 'running'
RETURNING id;
