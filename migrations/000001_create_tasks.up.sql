-- skiplock's schema. Every object is prefixed skiplock_ so that it can live
-- beside an application's own tables in the same schema.

CREATE TABLE skiplock_tasks (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text        NOT NULL DEFAULT 'default',
    name         text        NOT NULL,
    payload      jsonb       NOT NULL DEFAULT 'null',
    metadata     jsonb       NOT NULL DEFAULT '{}',
    status       text        NOT NULL DEFAULT 'pending',
    priority     smallint    NOT NULL DEFAULT 0,
    run_at       timestamptz NOT NULL DEFAULT now(),
    attempt      integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL DEFAULT 25,
    timeout_ms   bigint,
    -- One entry per attempt that did not succeed: attempt, outcome, error,
    -- worker, host, pid, started_at, finished_at. The successful attempt is
    -- the row itself (attempt, worker_id, started_at, finished_at).
    errors       jsonb       NOT NULL DEFAULT '[]',
    worker_id    text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz,

    CONSTRAINT skiplock_tasks_status_check
        CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    CONSTRAINT skiplock_tasks_name_check CHECK (name <> '' AND length(name) <= 255),
    CONSTRAINT skiplock_tasks_queue_check CHECK (queue <> '' AND length(queue) <= 255),
    CONSTRAINT skiplock_tasks_attempts_check CHECK (max_attempts > 0 AND attempt >= 0),
    CONSTRAINT skiplock_tasks_timeout_check CHECK (timeout_ms IS NULL OR timeout_ms > 0),
    CONSTRAINT skiplock_tasks_errors_check CHECK (jsonb_typeof(errors) = 'array')
);

-- The claim reads only this index: claimable rows in claim order. A row leaves
-- it as soon as it is claimed, so the index stays as small as the backlog.
CREATE INDEX skiplock_tasks_claim_idx
    ON skiplock_tasks (queue, priority, run_at, id)
    WHERE status = 'pending';

-- The rescuer scans running tasks; keep that independent of table size.
CREATE INDEX skiplock_tasks_running_idx
    ON skiplock_tasks (id)
    WHERE status = 'running';

-- Operators look for failed work by queue and time (skiplock requeue/list).
CREATE INDEX skiplock_tasks_finished_idx
    ON skiplock_tasks (status, queue, finished_at)
    WHERE status IN ('completed', 'failed', 'cancelled');

-- Every worker process registers itself, so an attempt can be traced to a
-- host and pid after the process is gone.
CREATE TABLE skiplock_workers (
    id               text        PRIMARY KEY,
    host             text        NOT NULL,
    pid              integer     NOT NULL,
    queues           text[]      NOT NULL,
    lock_backend_pid integer,
    started_at       timestamptz NOT NULL DEFAULT now(),
    heartbeat_at     timestamptz NOT NULL DEFAULT now()
);

-- Wake idle workers when work arrives. One notification per statement and
-- queue, delivered at commit, so EnqueueTx wakes nobody until it commits and
-- a bulk insert costs one notification, not one per row. The channel carries
-- the schema name so that two skiplock schemas in one database stay apart
-- (cut to 63 bytes, the longest identifier).
CREATE FUNCTION skiplock_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN SELECT DISTINCT queue FROM new_tasks WHERE run_at <= now() LOOP
        PERFORM pg_notify(left('skiplock_' || TG_TABLE_SCHEMA, 63), q);
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE TRIGGER skiplock_tasks_notify_insert
    AFTER INSERT ON skiplock_tasks
    REFERENCING NEW TABLE AS new_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION skiplock_notify_insert();
