-- The statements of pgbaton.testing, the test kit for pgbaton's users.

-- name: testing_jobs_truncate
-- Between two tests: every job gone and ids from 1 again, the schema itself kept
-- (migrating it anew for each test would cost more than the test). The history's
-- partitions stay, empty.
TRUNCATE __schema__.jobs, __schema__.jobs_history RESTART IDENTITY;

-- name: testing_schema_drop
-- The end of a test session: the schema made for it goes with everything in it.
DROP SCHEMA IF EXISTS __schema__ CASCADE;
