-- Expand only (docs/guarantees.md, "Rolling deploys"): the trace context of the enqueuing span.
-- A new nullable column, which the previous release's statements never name: they run on
-- unchanged. Adding it rewrites nothing (no default), so it takes its lock for a moment.

-- A job's headers: a JSON object of text values that travels with the job and is not an
-- argument of its handler. pgbaton.tracing writes the enqueuing span's context here
-- (W3C traceparent and tracestate) and the worker's span continues it. NULL, not '{}',
-- for a job without headers (most jobs): nothing stored, nothing read.
ALTER TABLE __schema__.jobs ADD COLUMN meta jsonb;
