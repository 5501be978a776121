-- Back to the previous migration: no stored schedules (their last ticks in
-- skiplock_periodic stay, as those of removed configured schedules do).
DROP TABLE IF EXISTS skiplock_schedules;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 18';
