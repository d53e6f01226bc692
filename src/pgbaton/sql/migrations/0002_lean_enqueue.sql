-- Idempotency keys move from a UNIQUE constraint to a partial unique index: a constraint
-- indexes every row, NULLs included, so each job without a key (most jobs) paid an index
-- entry for nothing. Enqueues now infer the index with
-- `ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL`.
-- The index is built with a write lock on the jobs table: on a large table, run this
-- migration at a quiet time.
ALTER TABLE __schema__.jobs DROP CONSTRAINT jobs_idempotency_key_unique;

CREATE UNIQUE INDEX jobs_idempotency_key_unique ON __schema__.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
