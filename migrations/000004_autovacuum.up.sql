-- A queue table churns: every task is inserted, updated at least twice
-- (claim, outcome) and, past its retention, deleted. PostgreSQL's defaults
-- vacuum a table when a fifth of it is dead, by which time a busy queue has
-- bloated its claim index and slowed every claim. Vacuum and analyze it
-- when 2% is dead or new instead. Storage parameters only: safe to set and
-- to reset.
ALTER TABLE skiplock_tasks SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 1000
);
