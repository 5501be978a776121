DROP TABLE IF EXISTS skiplock_periodic;
DROP TABLE IF EXISTS skiplock_rate_limits;
DROP TABLE IF EXISTS skiplock_queues;
DROP INDEX IF EXISTS skiplock_tasks_exclusive_running_idx;
DROP INDEX IF EXISTS skiplock_tasks_unique_window_key_idx;
DROP INDEX IF EXISTS skiplock_tasks_unique_key_idx;
ALTER TABLE skiplock_tasks
    DROP COLUMN IF EXISTS cancel_requested_at,
    DROP COLUMN IF EXISTS exclusive_key,
    DROP COLUMN IF EXISTS unique_window_key,
    DROP COLUMN IF EXISTS unique_key;
