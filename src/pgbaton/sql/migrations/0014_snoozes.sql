-- Handler outcomes (docs/howto/retries.md): how many times a job's handler snoozed
-- (raise pgbaton.Snooze). A snooze hands the job back to pending with its attempt given
-- back (job_release_many), so without this count a job that only ever snoozes could
-- never end; a task's max_snoozes ends it as failed past that many.
-- Expand only: the previous release never reads or writes it.
ALTER TABLE __schema__.jobs ADD COLUMN snoozes integer NOT NULL DEFAULT 0;
-- jobs_history keeps jobs' columns in their order (LIKE: NOT NULL, no default), and
-- the NOT NULL's name that LIKE copies from jobs (PostgreSQL 18 names them).
ALTER TABLE __schema__.jobs_history
    ADD COLUMN snoozes integer CONSTRAINT jobs_snoozes_not_null NOT NULL DEFAULT 0;
ALTER TABLE __schema__.jobs_history ALTER COLUMN snoozes DROP DEFAULT;
