-- name: JSONContains :one
-- The assertions of package skiplocktest match payloads and metadata as
-- PostgreSQL's jsonb containment does: objects by subset of keys, arrays by
-- subset of elements, numbers by value.
SELECT (@container::jsonb @> @contained::jsonb)::boolean AS contains;
