DROP TRIGGER IF EXISTS skiplock_tasks_notify_insert ON skiplock_tasks;
DROP FUNCTION IF EXISTS skiplock_notify_insert();
DROP TABLE IF EXISTS skiplock_workers;
DROP TABLE IF EXISTS skiplock_tasks;
