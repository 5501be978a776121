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
-- grants never exceed the limit. A claimer that read the clock before
-- the window turned, and reached the row after a claimer of the new window
-- had, gets nothing (and looks again): its grant would count against a
-- window that has ended while its tasks start in the new one, whose budget
-- another claimer may have used already. ms_elapsed, how far into its
-- window the database clock is, tells the claimer when the next window
-- begins.
INSERT INTO skiplock_rate_limits AS r (key, window_start, used, last_granted)
SELECT sqlc.arg(key)::text, cw.win,
       least(sqlc.arg(want)::integer, sqlc.arg(lim)::integer), least(sqlc.arg(want)::integer, sqlc.arg(lim)::integer)
FROM (SELECT to_timestamp(floor(extract(epoch FROM clock_timestamp()) / sqlc.arg(period_seconds)::float8)
                          * sqlc.arg(period_seconds)::float8) AS win) AS cw
ON CONFLICT (key) DO UPDATE
SET last_granted = CASE WHEN r.window_start > excluded.window_start THEN 0 ELSE greatest(0, least(excluded.used,
        sqlc.arg(lim)::integer - CASE WHEN r.window_start = excluded.window_start THEN r.used ELSE 0 END)) END,
    used = CASE WHEN r.window_start > excluded.window_start THEN r.used
                ELSE CASE WHEN r.window_start = excluded.window_start THEN r.used ELSE 0 END
                     + greatest(0, least(excluded.used,
                         sqlc.arg(lim)::integer - CASE WHEN r.window_start = excluded.window_start THEN r.used ELSE 0 END)) END,
    window_start = greatest(r.window_start, excluded.window_start)
RETURNING last_granted, window_start,
          floor(date_part('epoch', clock_timestamp() - window_start) * 1000)::bigint AS ms_elapsed;

-- name: RateLimitGiveBack :exec
-- Returns budget that a claim did not use, if its window is still current.
UPDATE skiplock_rate_limits
SET used = greatest(0, used - @unused::integer)
WHERE key = @key::text AND window_start = @current_window::timestamptz;

-- name: RateKeyTake :one
-- A per-key rate limit's grant (worker.RateLimit with PerKey): looks at up
-- to scan due pending tasks of the name in the queue, in claim order,
-- passing over keys with nothing left in the current fixed window (on the
-- database clock); picks the first want of them that the window's budget
-- of their keys (the task's limit_key; the empty key for none) allows; takes that
-- budget per key from skiplock_rate_keys under each row's lock, keys in
-- a fixed order; and returns the tasks granted, in claim order, with their
-- keys, and how long the window has left. As in RateLimitTake, a claimer
-- that waited on a row lock recomputes the SET list on the row its
-- predecessor committed, so grants never pass the limit; a key that lost
-- budget to a concurrent claimer gets only its first tasks, and one whose
-- row a claimer of the next window reached first gets none. The caller
-- claims the tasks by id (TaskClaim's only_ids) and gives back what it did
-- not claim (RateKeyGiveBack).
WITH cw AS MATERIALIZED (
    SELECT to_timestamp(b.n * @period_seconds::float8) AS win,
           to_timestamp((b.n + 1) * @period_seconds::float8) AS win_end,
           @lim::integer AS lim
    FROM (SELECT floor(extract(epoch FROM clock_timestamp()) / @period_seconds::float8) AS n) AS b
), seen AS MATERIALIZED (
    SELECT r.key, r.used
    FROM skiplock_rate_keys AS r
    WHERE r.scope = @scope::text AND r.window_start = (SELECT cw.win FROM cw)
), cand AS MATERIALIZED (
    SELECT p.id, coalesce(p.limit_key, '') AS key, p.priority, p.run_at
    FROM skiplock_tasks AS p
    WHERE p.status = 'pending'
      AND p.queue = @queue::text
      AND p.run_at <= now()
      AND p.name = @name::text
      AND p.crashes = 0 -- suspects run alone (TaskClaim)
      AND coalesce(p.limit_key, '') NOT IN (SELECT s.key FROM seen AS s WHERE s.used >= (SELECT cw.lim FROM cw))
    ORDER BY p.priority, p.run_at, p.id
    LIMIT @scan::integer
), ranked AS MATERIALIZED (
    SELECT c.id, c.key,
           row_number() OVER (PARTITION BY c.key ORDER BY c.priority, c.run_at, c.id) AS n,
           row_number() OVER (ORDER BY c.priority, c.run_at, c.id) AS pos
    FROM cand AS c
), chosen AS MATERIALIZED (
    -- The first want tasks that their key's budget, as this snapshot
    -- sees it, allows: per key, its first ones (n is 1, 2, ... in it).
    SELECT r.id, r.key, r.n, r.pos
    FROM ranked AS r
    LEFT JOIN seen AS s ON s.key = r.key
    CROSS JOIN cw
    WHERE r.n + coalesce(s.used, 0) <= cw.lim
    ORDER BY r.pos
    LIMIT @want::integer
), took AS MATERIALIZED (
    INSERT INTO skiplock_rate_keys AS r (scope, key, window_start, window_end, used, last_granted)
    SELECT @scope::text, w.key, cw.win, cw.win_end, w.want, w.want
    FROM (SELECT c.key, count(*)::integer AS want FROM chosen AS c GROUP BY c.key) AS w
    CROSS JOIN cw
    ORDER BY w.key
    ON CONFLICT (scope, key) DO UPDATE
    SET last_granted = CASE WHEN r.window_start > excluded.window_start THEN 0 ELSE greatest(0, least(excluded.used,
            (SELECT cw.lim FROM cw) - CASE WHEN r.window_start = excluded.window_start THEN r.used ELSE 0 END)) END,
        used = CASE WHEN r.window_start > excluded.window_start THEN r.used
                    ELSE CASE WHEN r.window_start = excluded.window_start THEN r.used ELSE 0 END
                         + greatest(0, least(excluded.used,
                             (SELECT cw.lim FROM cw) - CASE WHEN r.window_start = excluded.window_start THEN r.used ELSE 0 END)) END,
        window_start = greatest(r.window_start, excluded.window_start),
        window_end = greatest(r.window_end, excluded.window_end)
    RETURNING r.key, r.last_granted
), granted AS MATERIALIZED (
    SELECT c.id, c.key, c.pos
    FROM chosen AS c
    JOIN took AS t ON t.key = c.key
    WHERE c.n <= t.last_granted
)
SELECT coalesce((SELECT array_agg(g.id ORDER BY g.pos) FROM granted AS g), '{}')::bigint[] AS ids,
       coalesce((SELECT array_agg(g.key ORDER BY g.pos) FROM granted AS g), '{}')::text[] AS keys,
       w.win::timestamptz AS window_start,
       greatest(0, ceil(date_part('epoch', w.win_end - clock_timestamp()) * 1000))::bigint AS ms_left
FROM cw AS w;

-- name: RateKeyGiveBack :exec
-- Returns budget that a claim did not use, per key, if its window is
-- still current.
UPDATE skiplock_rate_keys AS r
SET used = greatest(0, r.used - u.unused)
FROM (SELECT unnest(@keys::text[]) AS key, unnest(@unused::integer[]) AS unused) AS u
WHERE r.scope = @scope::text AND r.key = u.key AND r.window_start = @current_window::timestamptz;

-- name: RateKeyRetire :execrows
-- Deletes the rows of per-key rate limits whose window has ended: the next
-- claim of such a key starts its window afresh whether or not the row is
-- there.
DELETE FROM skiplock_rate_keys WHERE window_end < clock_timestamp();

-- name: PeriodicLockLastTick :one
-- A schedule's last tick, its row locked until the transaction ends: a
-- scheduler enqueues the ticks after it and moves it on in that
-- transaction, so a second scheduler (a handover, a stalled one that
-- wakes up) waits, then reads the new last tick and enqueues nothing twice.
SELECT last_tick FROM skiplock_periodic WHERE schedule = @schedule::text FOR UPDATE;

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
