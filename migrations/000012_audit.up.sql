-- The audit trail: one row per operator change (requeue, cancel, delete,
-- purge, run now, pause, resume, a limit set or removed, an enqueue by
-- hand), whoever made it: the skiplock command, the dashboard, or a
-- program through package queue. Workers' own changes (outcomes, rescues,
-- retention) are not operator changes and are not recorded.
--
-- A change made in one transaction writes its row in that transaction. A
-- batched one (a requeue of a filter, a purge) writes its row before its
-- first batch, with finished_at NULL, adds each batch's count to affected
-- in that batch's transaction, and sets finished_at (and error, if it
-- stopped on one) at the end: the row is never behind what committed, and
-- one left unfinished tells of a run that was interrupted.
CREATE TABLE skiplock_audit (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    -- Who: the name the tool or the application gave (an OS user, a login).
    actor       text        NOT NULL DEFAULT '',
    -- And as whom the database saw it.
    db_role     text        NOT NULL DEFAULT current_user,
    source      text        NOT NULL,
    action      text        NOT NULL,
    -- What was asked: the task IDs, or the filter, and the options.
    request     jsonb       NOT NULL DEFAULT '{}',
    -- How many tasks (or queues, limits) it changed.
    affected    bigint      NOT NULL DEFAULT 0,
    finished_at timestamptz,
    error       text,
    CONSTRAINT skiplock_audit_source_check CHECK (source IN ('cli', 'dashboard', 'api')),
    CONSTRAINT skiplock_audit_action_check CHECK (action <> '' AND length(action) <= 64)
);

-- Lists read the newest first through the primary key (id DESC); --since
-- and the worker's retention read this one.
CREATE INDEX skiplock_audit_at_idx ON skiplock_audit (at);

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 12';
