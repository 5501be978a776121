-- Per-key rate limits (worker.RateLimit with PerKey): one row per limit
-- and key (the task's limit key, queue.WithLimitKey; '' for tasks without
-- one), counting the claims of its current fixed window. Claimers update a
-- row under its row lock, as skiplock_rate_limits' rows, so every worker on
-- every machine shares it. A row whose window has ended carries nothing
-- (the next claim of its key starts the window afresh), so the retirer
-- deletes those rows: the table holds at most the keys claimed lately.
-- Tasks, and limits without PerKey, never touch it.
CREATE TABLE skiplock_rate_keys (
    scope        text        NOT NULL,
    key          text        NOT NULL,
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    used         integer     NOT NULL DEFAULT 0,
    last_granted integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, key)
);
CREATE INDEX skiplock_rate_keys_window_end ON skiplock_rate_keys (window_end);

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 17';
