-- The statements `pgbaton doctor` runs. None of them changes a row: the doctor reads the
-- catalogue and the statistics views, and EXPLAINs (never executes) the claim.
-- __schema__ is replaced by the quoted schema name; %(name)s are bound parameters.

-- name: doctor_session_setup
-- A doctor must never hang a terminal or a monitoring probe behind someone's lock.
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false);

-- name: doctor_server
SELECT pg_backend_pid() AS pid,
       current_database() AS database,
       current_user AS "user",
       current_setting('server_version') AS version,
       current_setting('server_version_num')::int AS version_num,
       pg_has_role(current_user, 'pg_read_all_stats', 'member') AS reads_all_stats;

-- name: doctor_index_state
-- to_regclass() is NULL when the index does not exist (or is not in this schema).
SELECT i.indisvalid AS valid,
       i.indisready AS ready,
       pg_get_indexdef(i.indexrelid) AS definition,
       pg_relation_size(i.indexrelid) AS bytes
FROM pg_index AS i
WHERE i.indexrelid = to_regclass(%(index)s);

-- name: doctor_table_size
SELECT c.relpages AS pages_estimated,
       c.reltuples::float8 AS rows_estimated,
       pg_relation_size(c.oid) / current_setting('block_size')::int AS pages
FROM pg_class AS c
WHERE c.oid = to_regclass(%(table)s);

-- name: doctor_plan_natural
-- Plans are compared with JIT off: JIT changes no plan shape, only adds lines to it.
SELECT set_config('jit', 'off', true);

-- name: doctor_plan_without_seqscan
-- "Can the claim use the index at all?": a seq scan is still possible but priced out,
-- so a plan that keeps one has no index to read instead.
SELECT set_config('jit', 'off', true), set_config('enable_seqscan', 'off', true);

-- name: doctor_idle_in_transaction
-- Sessions of this database that opened a transaction and went quiet. state_change is
-- when they went idle, as for PostgreSQL's own idle_in_transaction_session_timeout.
-- last_query is other sessions' SQL, literals and all: the doctor shows it only with
-- every literal removed (doctor/statements.py).
SELECT a.pid,
       a.usename AS "user",
       a.application_name,
       host(a.client_addr) AS client_addr,
       a.state,
       extract(epoch FROM now() - a.state_change)::float8 AS idle_seconds,
       extract(epoch FROM now() - a.xact_start)::float8 AS transaction_seconds,
       age(a.backend_xmin) AS xmin_age,
       a.backend_xid IS NOT NULL AS has_written,
       a.query AS last_query
FROM pg_stat_activity AS a
WHERE a.datname = current_database()
  AND a.pid <> pg_backend_pid()
  AND a.state IN ('idle in transaction', 'idle in transaction (aborted)')
ORDER BY a.state_change;

-- name: doctor_hidden_sessions
-- Sessions of other roles whose state this role may not see (no pg_read_all_stats).
SELECT count(*) AS hidden
FROM pg_stat_activity AS a
WHERE a.datname = current_database()
  AND a.pid <> pg_backend_pid()
  AND a.query = '<insufficient privilege>';

-- name: doctor_old_snapshots
-- Transactions that hold back the xmin horizon, so that VACUUM cannot remove the dead
-- versions every claim and completion leaves behind in jobs. Autovacuum workers are
-- left out: their own xmin is ignored by other vacuums.
SELECT a.pid,
       a.usename AS "user",
       a.application_name,
       host(a.client_addr) AS client_addr,
       a.backend_type,
       a.state,
       extract(epoch FROM now() - a.xact_start)::float8 AS transaction_seconds,
       age(a.backend_xmin) AS xmin_age,
       age(a.backend_xid) AS xid_age,
       a.query AS last_query
FROM pg_stat_activity AS a
WHERE a.datname = current_database()
  AND a.pid <> pg_backend_pid()
  AND a.backend_type <> 'autovacuum worker'
  AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
  AND a.xact_start IS NOT NULL
ORDER BY a.xact_start;

-- name: doctor_prepared_transactions
SELECT p.gid,
       p.owner,
       extract(epoch FROM now() - p.prepared)::float8 AS prepared_seconds,
       age(p.transaction) AS xid_age
FROM pg_prepared_xacts AS p
WHERE p.database = current_database()
ORDER BY p.prepared;

-- name: doctor_replication_slots
-- A slot's xmin (hot_standby_feedback, or a slot nobody consumes) holds back every
-- database's horizon; catalog_xmin concerns only the catalogue, not jobs.
SELECT s.slot_name, s.slot_type, s.active, age(s.xmin) AS xmin_age
FROM pg_replication_slots AS s
WHERE s.xmin IS NOT NULL
ORDER BY age(s.xmin) DESC;

-- name: doctor_jobs_vacuum
-- The jobs table's row counts and (auto)vacuum history, with the point at which the
-- server's settings (or the table's own storage parameters) start an autovacuum.
SELECT t.n_live_tup AS live_rows,
       t.n_dead_tup AS dead_rows,
       t.n_mod_since_analyze AS modified_since_analyze,
       t.last_vacuum, t.last_autovacuum, t.last_analyze, t.last_autoanalyze,
       extract(epoch FROM now() - greatest(t.last_vacuum, t.last_autovacuum))::float8
           AS seconds_since_vacuum,
       t.vacuum_count, t.autovacuum_count,
       pg_total_relation_size(t.relid) AS total_bytes,
       current_setting('autovacuum') = 'on' AS autovacuum_on,
       current_setting('track_counts') = 'on' AS track_counts_on,
       coalesce((SELECT option_value::bool FROM pg_options_to_table(c.reloptions)
                 WHERE option_name = 'autovacuum_enabled'), true) AS table_autovacuum_on,
       coalesce((SELECT option_value::float8 FROM pg_options_to_table(c.reloptions)
                 WHERE option_name = 'autovacuum_vacuum_threshold'),
                current_setting('autovacuum_vacuum_threshold')::float8)
       + coalesce((SELECT option_value::float8 FROM pg_options_to_table(c.reloptions)
                   WHERE option_name = 'autovacuum_vacuum_scale_factor'),
                  current_setting('autovacuum_vacuum_scale_factor')::float8)
         * greatest(c.reltuples, 0) AS autovacuum_trigger
FROM pg_stat_user_tables AS t
JOIN pg_class AS c ON c.oid = t.relid
WHERE t.relid = to_regclass(%(table)s);

-- name: doctor_expired_leases
-- Running jobs whose lease ran out more than the grace ago: nobody heartbeats them and
-- nobody reaps them (the reaper's job_reap would have sent them back to pending).
SELECT j.id, j.queue, j.task, j.worker_id, j.attempts, j.max_attempts,
       extract(epoch FROM now() - j.lease_until)::float8 AS expired_seconds,
       count(*) OVER () AS total
FROM __schema__.jobs AS j
WHERE j.status = 'running'
  AND j.lease_until < now() - make_interval(secs => %(grace)s::float8)
ORDER BY j.lease_until
LIMIT %(limit)s;

-- name: doctor_maintenance_leader
-- The session holding the maintenance leader's advisory lock (leader_try_acquire), if
-- any. pg_locks shows a bigint key as its high and low 32 bits.
WITH lock_key AS (
    SELECT hashtext('pgbaton.leader.' || %(schema)s)::bigint AS k
)
SELECT l.pid, a.application_name, host(a.client_addr) AS client_addr,
       extract(epoch FROM now() - a.backend_start)::float8 AS connected_seconds
FROM pg_locks AS l
CROSS JOIN lock_key
LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory'
  AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.objsubid = 1
  AND l.classid::bigint = (lock_key.k >> 32) & 4294967295
  AND l.objid::bigint = lock_key.k & 4294967295;

-- name: doctor_queue_lag
-- Per queue: how long the oldest due pending job has waited since it became due (the
-- lag a worker fleet keeps near zero), beside what is scheduled and running. Each half
-- reads only its own partial index's rows, never the done ones: the pending half
-- jobs_claimable's, the running half jobs_held's. A running job always holds a lease
-- (the CHECK jobs_token_while_held), so `lease_until IS NOT NULL` drops no running job;
-- it is there because `status = 'running'` alone implies no index's predicate, and the
-- running half would read the whole table. A paused queue's lag is the pause, not a
-- missing worker: the finding says which.
SELECT queue,
       bool_or(coalesce(q.paused, false)) AS paused,
       sum(due)::bigint AS due,
       sum(scheduled)::bigint AS scheduled,
       sum(running)::bigint AS running,
       max(lag_seconds) AS lag_seconds
FROM (
    SELECT j.queue,
           count(*) FILTER (WHERE j.run_at <= now()) AS due,
           count(*) FILTER (WHERE j.run_at > now()) AS scheduled,
           0 AS running,
           extract(epoch FROM now() - min(j.run_at) FILTER (WHERE j.run_at <= now()))::float8
               AS lag_seconds
    FROM __schema__.jobs AS j
    WHERE j.status = 'pending'
    GROUP BY j.queue
    UNION ALL
    SELECT j.queue, 0, 0, count(*), NULL
    FROM __schema__.jobs AS j
    WHERE j.status = 'running' AND j.lease_until IS NOT NULL  -- jobs_held's predicate
    GROUP BY j.queue
) AS per_status
LEFT JOIN __schema__.queues AS q ON q.name = per_status.queue
GROUP BY queue
ORDER BY queue;

-- name: doctor_history_size
-- The history retention mode's jobs_history (docs/explanation/retention.md): how many
-- partitions and how many bytes, from the catalogue alone. No table (a schema before
-- migration 8): none and 0.
SELECT count(i.inhrelid) AS partitions,
       coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint AS bytes
FROM pg_inherits AS i
WHERE i.inhparent = to_regclass(%(table)s);

-- name: doctor_jobs_indexes
-- A jobs table's indexes as the catalogue defines them. body is the definition from
-- USING on, which does not name the table, so the live schema's indexes and those of a
-- reference copy compare as they are.
SELECT c.relname AS name,
       i.indisunique AS is_unique,
       i.indisvalid AS valid,
       substr(d.definition, strpos(d.definition, ' USING ') + 1) AS body
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
CROSS JOIN LATERAL (SELECT pg_get_indexdef(i.indexrelid) AS definition) AS d
WHERE i.indrelid = to_regclass(%(table)s)
ORDER BY c.relname;

-- name: doctor_jobs_constraints
-- A jobs table's constraints (primary key, checks) as the catalogue defines them.
SELECT con.conname AS name,
       con.contype::text AS kind,
       pg_get_constraintdef(con.oid) AS definition
FROM pg_constraint AS con
WHERE con.conrelid = to_regclass(%(table)s)
ORDER BY con.conname;
