-- Periodic schedules stored in the database: added, changed, paused and
-- removed at run time (queue.Client.AddSchedule, `skiplock schedules`, the
-- dashboard), and run by the elected scheduler beside Config.Periodic.
-- Each schedule's last tick stays in skiplock_periodic, under its name,
-- and each tick's uniqueness is the task's unique key, as for schedules
-- of the configuration. Plain tasks never read this table.
CREATE TABLE skiplock_schedules (
    name       text        PRIMARY KEY,
    -- Exactly one of cron (a cron expression) and every_ms (a fixed
    -- interval aligned to the Unix epoch).
    cron       text,
    every_ms   bigint,
    task_name  text        NOT NULL,
    payload    jsonb       NOT NULL DEFAULT 'null',
    -- The task's options: queue, priority, max_attempts, timeout_ms.
    options    jsonb       NOT NULL DEFAULT '{}',
    -- Missed ticks: false skips them, true runs the latest once.
    catch_up   boolean     NOT NULL DEFAULT false,
    paused_at  timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT skiplock_schedules_name_check CHECK (name <> '' AND length(name) <= 255),
    CONSTRAINT skiplock_schedules_spec_check CHECK ((cron IS NULL) <> (every_ms IS NULL)),
    CONSTRAINT skiplock_schedules_every_check CHECK (every_ms IS NULL OR every_ms >= 1000)
);

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 19';
