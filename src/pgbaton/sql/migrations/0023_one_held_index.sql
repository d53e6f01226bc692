-- Expand only (docs/explanation/guarantees.md, "Rolling deploys"): one index of the jobs
-- that hold a lease, where two were written by every claim. jobs_running_lease
-- (lease_until, migration 1: the reaper's scan) and jobs_queue_held (queue, migration 4:
-- a limited queue's held count) had the same rows, lease_until IS NOT NULL, so each
-- claimed job wrote an entry into both, and again at each heartbeat that moved its lease
-- (benchmarks/results/job-cost-2026-12-06.md: jobs_queue_held alone cost 3.2
-- microseconds of server CPU and 73 bytes of WAL a job). jobs_held (queue, lease_until)
-- serves both:
--
-- - the flow claim's held count (job_claim_flow), the queue list's and the dashboard's
--   per-queue counts read one queue's entries, an equality on the first column;
-- - the reaper (job_reap) and the other readers of expired leases (doctor, the queue
--   counts) read all its entries with `lease_until < now()` tested in the index. Its
--   entries are the running jobs and the few cancelled ones whose holder has not let
--   go (and the dead entries of jobs that finished since the last vacuum, which the
--   reaper's range scan of jobs_running_lease read as well: their leases had passed).
--
-- No statement names an index, and the previous release's statements are this one's:
-- each plans onto jobs_held when the old indexes go. Statements it had prepared are
-- planned again (dropping an index invalidates the plans that used it). The indexes go
-- after jobs_held is built, in the migration's transaction: nothing sees the table
-- without one of them.
--
-- The migration locks jobs ACCESS EXCLUSIVE first, and holds it to its commit. Building
-- the index alone takes a lock that blocks writes (SHARE) and the DROPs then need
-- ACCESS EXCLUSIVE: a transaction that had read jobs and then wrote to it (an enqueue
-- after a read of jobs, in one transaction) deadlocked with that upgrade, and one of
-- the two was aborted. Taken first, the lock waits for the transactions that use jobs
-- to end, and then nothing reads or writes jobs until the migration commits: the
-- build reads the whole table (it writes few entries, the running jobs'). CREATE
-- INDEX CONCURRENTLY cannot run in a migration's transaction: on a large table, create
-- it CONCURRENTLY under this name before `pgbaton migrate`, and IF NOT EXISTS leaves
-- it be, so the lock lasts only for the DROPs (a build that failed leaves an invalid
-- index behind: drop it and build again, or the check below stops the migration).
-- Once jobs_held is built, DROP INDEX CONCURRENTLY may drop the old two beforehand,
-- and IF EXISTS leaves them gone.
LOCK TABLE __schema__.jobs IN ACCESS EXCLUSIVE MODE;

CREATE INDEX IF NOT EXISTS jobs_held ON __schema__.jobs (queue, lease_until)
    WHERE lease_until IS NOT NULL;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index
               WHERE indexrelid = '__schema__.jobs_held'::regclass AND NOT indisvalid) THEN
        RAISE EXCEPTION 'index jobs_held is invalid (a CREATE INDEX CONCURRENTLY that '
            'failed?): drop it, then migrate again';
    END IF;
END
$$;

DROP INDEX IF EXISTS __schema__.jobs_running_lease;
DROP INDEX IF EXISTS __schema__.jobs_queue_held;
