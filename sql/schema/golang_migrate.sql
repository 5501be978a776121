-- golang-migrate creates and owns this table (x-migrations-table); it is
-- declared here only so that sqlc can type the queries that read it.
CREATE TABLE skiplock_schema_migrations (
    version bigint  NOT NULL PRIMARY KEY,
    dirty   boolean NOT NULL
);
