-- Expand only (docs/guarantees.md, "Rolling deploys"): every statement of the previous
-- release keeps working against this schema, so its producers and workers may run on
-- while this release rolls out. What the previous release needs and this one does not
-- (the global idempotency index) is dropped by a later release, never by this one.
-- The index builds and the constraint check hold a write lock on the jobs table while
-- they scan it: on a large table, run this migration at a quiet time.

-- Idempotency keys are per task: `send_receipt` and `charge_card` may both use
-- `order-42`. The global jobs_idempotency_key_unique stays for the previous release,
-- whose enqueue names it in ON CONFLICT; until it goes, reusing a key across tasks is
-- refused with IdempotencyKeyTaken instead of returning the other task's job.
CREATE UNIQUE INDEX jobs_task_idempotency_key_unique ON __schema__.jobs (task, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- A running job cancelled by an operator keeps its claim token and lease: its key stays
-- held until the holder releases it (its handler has stopped) or the lease runs out.
-- Only a running job must hold a token; a cancelled one may, and so may a pending one
-- (a retry of a job still held keeps the hold; the previous release's retry leaves it).
ALTER TABLE __schema__.jobs
    DROP CONSTRAINT jobs_token_iff_running,
    ADD CONSTRAINT jobs_token_while_held CHECK (
        CASE status
            WHEN 'running' THEN claim_token IS NOT NULL AND lease_until IS NOT NULL
            WHEN 'done' THEN claim_token IS NULL AND lease_until IS NULL
            WHEN 'failed' THEN claim_token IS NULL AND lease_until IS NULL
            ELSE (claim_token IS NULL) = (lease_until IS NULL)
        END);

-- The claim's third per-key probe: a job cancelled (and perhaps retried) whose old
-- handler may still run.
CREATE INDEX jobs_key_held_after_cancel ON __schema__.jobs (key)
    WHERE key IS NOT NULL AND claim_token IS NOT NULL AND status IN ('cancelled', 'pending');
