-- The schema and its version: what migrate() runs around the numbered migrations.
-- __schema__ is replaced by the quoted schema name; %(name)s are bound parameters.
-- Each state change guards, in SQL, the state it leaves
-- (docs/explanation/state_machine.md).

-- name: migration_lock
SELECT pg_advisory_xact_lock(hashtext('pgbaton.migrate.' || %(schema)s));

-- name: schema_create
CREATE SCHEMA IF NOT EXISTS __schema__;

-- name: schema_version_create
CREATE TABLE IF NOT EXISTS __schema__.schema_version (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: schema_version_get
SELECT coalesce(max(version), 0) AS version FROM __schema__.schema_version;

-- name: schema_version_table_exists
SELECT to_regclass(%(table)s) IS NOT NULL AS exists;

-- name: schema_version_record
INSERT INTO __schema__.schema_version (version, name) VALUES (%(version)s, %(name)s);
