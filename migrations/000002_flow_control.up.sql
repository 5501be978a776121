-- Flow control: unique and exclusive tasks, cancellation of running tasks,
-- paused queues, shared rate limits, periodic schedules.

ALTER TABLE skiplock_tasks
    ADD COLUMN unique_key          text,
    ADD COLUMN unique_window_key   text,
    ADD COLUMN exclusive_key       text,
    ADD COLUMN cancel_requested_at timestamptz;

-- At most one pending or running task per unique key: the index, not a
-- read-then-write, rejects the second.
-- skiplock:concurrently
CREATE UNIQUE INDEX skiplock_tasks_unique_key_idx
    ON skiplock_tasks (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'running');

-- At most one task per windowed key, whatever its status: the key carries
-- its window (or a periodic schedule's tick).
-- skiplock:concurrently
CREATE UNIQUE INDEX skiplock_tasks_unique_window_key_idx
    ON skiplock_tasks (unique_window_key)
    WHERE unique_window_key IS NOT NULL;

-- At most one running task per exclusive key, cluster-wide. The claim skips
-- keys that are running; this index is the guarantee behind it.
-- skiplock:concurrently
CREATE UNIQUE INDEX skiplock_tasks_exclusive_running_idx
    ON skiplock_tasks (exclusive_key)
    WHERE exclusive_key IS NOT NULL AND status = 'running';

CREATE TABLE skiplock_queues (
    name       text PRIMARY KEY,
    paused_at  timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row per rate limit: the count of claims in the current fixed window.
-- Claimers update it under its row lock, so every worker on every machine
-- shares it.
CREATE TABLE skiplock_rate_limits (
    key          text PRIMARY KEY,
    window_start timestamptz NOT NULL,
    used         integer     NOT NULL DEFAULT 0,
    last_granted integer     NOT NULL DEFAULT 0
);

-- The last tick enqueued for each periodic schedule, for the missed-ticks
-- policy; uniqueness of each tick is unique_window_key's job.
CREATE TABLE skiplock_periodic (
    schedule   text PRIMARY KEY,
    last_tick  timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
