-- Each run's own log lines (docs/howto/progress-and-logs.md): a run that gives its
-- attempt back (a snooze, a durable sleep or wait, a release at shutdown, an operator's
-- retry) runs again at the same attempt number, so one row per attempt mixed or lost
-- the later runs' lines. Now one row per run: `run` numbers the job's runs that kept
-- lines, in the order they were written; `token` is the claim of that run (it fences a
-- second write of the same run); `ended` says how the run ended. The rows written
-- before this migration (one per attempt) get their run numbers in attempt order, and
-- no token and no `ended`.
ALTER TABLE __schema__.job_logs
    ADD COLUMN run   integer,
    ADD COLUMN token uuid,
    ADD COLUMN ended text;

UPDATE __schema__.job_logs AS l
SET run = numbered.run
FROM (SELECT job_id, attempt,
             row_number() OVER (PARTITION BY job_id ORDER BY attempt) AS run
      FROM __schema__.job_logs) AS numbered
WHERE l.job_id = numbered.job_id AND l.attempt = numbered.attempt;

ALTER TABLE __schema__.job_logs ALTER COLUMN run SET NOT NULL;
ALTER TABLE __schema__.job_logs DROP CONSTRAINT job_logs_pkey;
ALTER TABLE __schema__.job_logs ADD PRIMARY KEY (job_id, run);
