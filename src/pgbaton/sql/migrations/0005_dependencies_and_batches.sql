-- Expand only (docs/guarantees.md, "Rolling deploys"): dependencies and batches.
-- (Placeholder: filled in by the change that needs it.)
SELECT 1;
