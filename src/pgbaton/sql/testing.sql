-- The statements of pgbaton.testing, the test kit for pgbaton's users.

-- name: testing_jobs_truncate
-- Between two tests: every job gone and ids from 1 again, the schema itself kept
-- (migrating it anew for each test would cost more than the test). The history's
-- partitions stay, empty. Every table of rows that belong to a job goes too: a TRUNCATE
-- fires no delete trigger, and the next test's job 1 must not find the last one's steps.
TRUNCATE __schema__.jobs, __schema__.jobs_history, __schema__.job_logs,
    __schema__.job_steps, __schema__.job_events RESTART IDENTITY;

-- name: testing_schema_drop
-- The end of a test session: the schema made for it goes with everything in it.
DROP SCHEMA IF EXISTS __schema__ CASCADE;
