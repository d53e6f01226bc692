-- Expand only (docs/guarantees.md, "Rolling deploys"): flow control (issue 14: queues, limits, pause).
-- (Placeholder: filled in by the change that needs it.)
SELECT 1;
