-- Cluster-wide concurrency limits: at most max_running tasks of a queue, of
-- a task name, or of each limit key matching a pattern (a tenant, say) run
-- at once across every worker. Nothing here is read by a claim while the
-- table is empty.
--
-- In advisory mode a claim takes, for each limit a task falls under, one of
-- max_running "slot" advisory locks on its lock session, (OID of
-- skiplock_limits, hash of the scope + slot), and releases it with the
-- task's lock: a worker that dies frees its slots with its session. In lease
-- mode a claim of limited tasks counts running rows under a transaction
-- lock per limit (worker/limits.go).
CREATE TABLE skiplock_limits (
    kind        text        NOT NULL,
    target      text        NOT NULL,
    max_running integer     NOT NULL,
    -- For kind 'key': target as a LIKE pattern, '*' the only wildcard.
    pattern     text GENERATED ALWAYS AS (
        replace(replace(replace(replace(target, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')) STORED,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, target),
    CONSTRAINT skiplock_limits_kind_check CHECK (kind IN ('queue', 'name', 'key')),
    CONSTRAINT skiplock_limits_target_check CHECK (target <> '' AND length(target) <= 1024),
    CONSTRAINT skiplock_limits_max_check CHECK (max_running > 0)
);

-- The key a task's 'key' limits match (queue.WithLimitKey); NULL for none.
ALTER TABLE skiplock_tasks ADD COLUMN limit_key text;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 10';
