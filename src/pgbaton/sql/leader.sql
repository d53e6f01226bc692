-- The leader's lock: one leader per schema, held for the life of its connection.
-- __schema__ is replaced by the quoted schema name; %(name)s are bound parameters.
-- Each state change guards, in SQL, the state it leaves
-- (docs/explanation/state_machine.md).

-- name: leader_try_acquire
-- A session-level lock: held while the leader's connection lives, released by
-- PostgreSQL the moment that connection dies.
SELECT pg_try_advisory_lock(hashtext('pgbaton.leader.' || %(schema)s)) AS acquired;
