-- Unique jobs (docs/howto/unique.md): a unique job's key and the states in which it
-- blocks another job of that key; NULL for every other job, which never enters the
-- index below, so plain jobs pay for neither column.
-- Expand only: the previous release never reads or writes them.

ALTER TABLE __schema__.jobs
    ADD COLUMN unique_key bytea,
    ADD COLUMN unique_states text[];

-- jobs_history was made LIKE jobs; the mover copies rows with SELECT *.
ALTER TABLE __schema__.jobs_history
    ADD COLUMN unique_key bytea,
    ADD COLUMN unique_states text[];

ALTER TABLE __schema__.jobs
    ADD CONSTRAINT jobs_unique_whole CHECK ((unique_key IS NULL) = (unique_states IS NULL));

-- At most one job per unique key among those whose status is one of their own blocking
-- states: the enqueue's ON CONFLICT meets it, and a job that leaves its states (it
-- finished, say) leaves the index and lets the next one in.
CREATE UNIQUE INDEX jobs_unique_key ON __schema__.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status = ANY (unique_states);
