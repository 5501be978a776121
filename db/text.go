package db

// TaskFinishManySQL is the text of TaskFinishMany, for tests that check
// how PostgreSQL plans it (EXPLAIN).
const TaskFinishManySQL = taskFinishMany
