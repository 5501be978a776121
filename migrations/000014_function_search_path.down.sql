-- Back to migration 13: functions that resolve names through their
-- caller's search_path.
ALTER FUNCTION skiplock_enqueue_task(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb, text, boolean) RESET search_path;
ALTER FUNCTION skiplock_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb, text, boolean) RESET search_path;
ALTER FUNCTION skiplock_enqueue_many(jsonb) RESET search_path;
ALTER FUNCTION skiplock_workflow_advance() RESET search_path;
ALTER FUNCTION skiplock_sequence_enter(text[]) RESET search_path;
ALTER FUNCTION skiplock_sequence_admits(text, bigint, bigint[]) RESET search_path;
ALTER FUNCTION skiplock_sequence_release(text, text) RESET search_path;
ALTER FUNCTION skiplock_sequence_advance() RESET search_path;
ALTER FUNCTION skiplock_input_limit(text, bigint) RESET search_path;
ALTER FUNCTION skiplock_check_size(text, bigint, bigint, text) RESET search_path;
ALTER FUNCTION skiplock_check_length(text, text, boolean, integer) RESET search_path;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 13';
