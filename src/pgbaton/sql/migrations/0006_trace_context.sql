-- Expand only (docs/guarantees.md, "Rolling deploys"): the trace context of the enqueuing span.
-- (Placeholder: filled in by the change that needs it.)
SELECT 1;
