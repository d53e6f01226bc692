-- The history retention mode's mover and drop run as plain statements from Python
-- (sql/history.sql, AsyncQueue.archive and drop_history): they run on the leader's
-- path, a few times a minute, where a round trip costs nothing. The PL/pgSQL functions
-- that did it in the database go. jobs_history_partitions stays: a plain SQL read of
-- the catalogue that the statements share.
-- The flow claim's overloads of six and five arguments go too: they answered the calls
-- of schema versions 4 to 8, and every pgbaton since calls the one of seven.
-- Not a contract step against a release (docs/guarantees.md, "Rolling deploys"): all
-- of these came after the last release (schema version 3), whose statements never call
-- them; docs/compat.md lists what that release still needs.

DROP FUNCTION __schema__.jobs_history_prepare(float8, float8, integer);
DROP FUNCTION __schema__.jobs_history_drop(float8, float8);
DROP FUNCTION __schema__.jobs_history_partition_create(timestamptz, timestamptz);
DROP FUNCTION __schema__.job_claim_flow(text, integer, float8, text[], text[], uuid[]);
DROP FUNCTION __schema__.job_claim_flow(text, integer, float8, text[], text[]);
