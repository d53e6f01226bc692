-- Expand only (docs/guarantees.md, "Rolling deploys"): the trace context of the enqueuing span.
-- A new nullable column, which the previous release's statements never name: they run on
-- unchanged. Adding it rewrites nothing (no default), so it takes its lock for a moment.

-- A job's headers: a JSON object of text values that travels with the job and is not an
-- argument of its handler. pgbaton.tracing writes the enqueuing span's context here
-- (W3C traceparent and tracestate) and the worker's span continues it. NULL, not '{}',
-- for a job without headers (most jobs): nothing stored, nothing read.
ALTER TABLE __schema__.jobs ADD COLUMN meta jsonb;

-- Failed jobs newest first (the dashboard's failed list) and their count per queue (its
-- overview), read from this index alone however many finished jobs the table keeps.
-- Only failed rows enter it, so enqueue, claim and completion never write to it
-- (benchmarks/dashboard_index_cost.py). Building it scans the table under a lock that
-- blocks writes, and CREATE INDEX CONCURRENTLY cannot run in a migration's transaction:
-- on a large table, create it CONCURRENTLY under this name before `pgbaton migrate`,
-- and IF NOT EXISTS leaves it be.
CREATE INDEX IF NOT EXISTS jobs_failed ON __schema__.jobs (id) INCLUDE (queue)
    WHERE status = 'failed';
