DROP TABLE IF EXISTS skiplock_leaders;
DROP INDEX IF EXISTS skiplock_tasks_lease_idx;
ALTER TABLE skiplock_tasks DROP COLUMN IF EXISTS locked_until;
