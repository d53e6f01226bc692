-- Expand only (docs/guarantees.md, "Rolling deploys"): the history table of the "history"
-- retention mode (docs/retention.md). Only additions: a partitioned table with no
-- partition yet, its index and four functions. The previous release never names them;
-- its statements run on unchanged, and it deletes finished jobs from `jobs` as before.
-- Nothing here scans or locks `jobs` beyond reading its definition for LIKE.

-- Done jobs moved out of `jobs` by the mover (job_history_move), kept until their
-- partition is dropped whole: a drop leaves no dead rows for autovacuum, as a DELETE
-- does. Exactly the columns of jobs in the same order (the move is INSERT ... SELECT *;
-- tests/integration/test_history.py checks it, so a migration that adds a column to
-- jobs must add it here too). LIKE copies the NOT NULLs and nothing else: no defaults,
-- no identity, no checks and no unique index, none of which a copy of checked rows
-- needs, and each of which would cost every insert. Partitioned by finished_at, by
-- ranges of the mover's width, created on demand (jobs_history_prepare).
CREATE TABLE __schema__.jobs_history (LIKE __schema__.jobs) PARTITION BY RANGE (finished_at);

-- Queue.get and the job page find a moved job by id (one probe per partition). Not
-- unique: a unique index of a partitioned table must hold the partition key.
CREATE INDEX jobs_history_id ON __schema__.jobs_history (id);

-- The partitions of jobs_history with their bounds, oldest first, read from the
-- catalogue (the bounds as PostgreSQL prints them, cast back in the same session).
CREATE FUNCTION __schema__.jobs_history_partitions()
RETURNS TABLE (name text, from_at timestamptz, to_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text, bound[1]::timestamptz, bound[2]::timestamptz
    FROM pg_inherits AS i
    JOIN pg_class AS c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                    'FROM \(''([^'']+)''\) TO \(''([^'']+)''\)') AS bound
    WHERE i.inhparent = '__schema__.jobs_history'::regclass
    ORDER BY 2, 1
$$;

-- One partition for [from_at, to_at), named after its start in UTC so that an operator
-- reads it: jobs_history_20261201 for a range of whole days, jobs_history_20261201_1300
-- otherwise. Created apart and then attached: ATTACH takes SHARE UPDATE EXCLUSIVE on
-- jobs_history, so readers and other movers' inserts go on meanwhile (CREATE TABLE ...
-- PARTITION OF would take ACCESS EXCLUSIVE). The new table is empty, so the attach's
-- check of its rows and the build of its id index cost nothing.
CREATE FUNCTION __schema__.jobs_history_partition_create(from_at timestamptz, to_at timestamptz)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    origin CONSTANT timestamptz := '2000-01-01 00:00:00+00';
    whole_days boolean := date_bin('1 day', from_at, origin) = from_at
                          AND date_bin('1 day', to_at, origin) = to_at;
    name text := 'jobs_history_' || to_char(from_at AT TIME ZONE 'UTC',
                                            CASE WHEN whole_days THEN 'YYYYMMDD'
                                                 ELSE 'YYYYMMDD_HH24MI' END);
BEGIN
    EXECUTE format('CREATE TABLE __schema__.%I (LIKE __schema__.jobs_history)', name);
    EXECUTE format('ALTER TABLE __schema__.jobs_history ATTACH PARTITION __schema__.%I'
                   ' FOR VALUES FROM (%L) TO (%L)', name, from_at, to_at);
    RETURN name;
END;
$$;

-- The mover's first step, in the transaction of its move (job_history_move): the
-- partition bins (date_bin of finished_at by width_secs, from midnight UTC) of
-- the next `wanted` jobs it may move (done, no idempotency key, finished
-- more than after_secs ago), each bin made fully covered by partitions.
-- The jobs are locked (SKIP LOCKED: those another mover holds are passed over, so two
-- movers take different jobs and make ready the bins of their own). Returns the bins;
-- the move then takes only jobs of these bins, so a job finished meanwhile in another
-- bin waits for the next batch instead of failing this one.
-- Movers share the history lock, which jobs_history_drop takes alone: no partition made
-- ready here is dropped before this transaction ends. Creating takes a second lock
-- alone, and looks again once it has it, so two movers (the leader and `pgbaton
-- prune`) never both create one partition: the second finds the first's. A bin already
-- covered in part (the width was changed) gets partitions for its gaps only.
CREATE FUNCTION __schema__.jobs_history_prepare(after_secs float8, width_secs float8, wanted integer)
RETURNS timestamptz[]
LANGUAGE plpgsql AS $$
DECLARE
    origin CONSTANT timestamptz := '2000-01-01 00:00:00+00';
    step interval := make_interval(secs => width_secs);
    history_key integer := ('__schema__.jobs_history'::regclass::oid::bigint
                            - 2147483648)::integer;
    bins timestamptz[];
    bin timestamptz;
    covered interval;
    gap_from timestamptz;
    part record;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('pgbaton.history'), history_key);
    SELECT array_agg(DISTINCT date_bin(step, c.finished_at, origin)) INTO bins
    FROM (SELECT j.finished_at FROM __schema__.jobs AS j
          WHERE j.status = 'done' AND j.idempotency_key IS NULL
            AND j.finished_at < now() - make_interval(secs => after_secs)
          ORDER BY j.finished_at
          LIMIT wanted
          FOR UPDATE SKIP LOCKED) AS c;
    FOREACH bin IN ARRAY coalesce(bins, '{}') LOOP
        -- Partitions never overlap: the bin is covered when their overlaps add up to it.
        SELECT coalesce(sum(least(p.to_at, bin + step) - greatest(p.from_at, bin)),
                        interval '0')
        INTO covered
        FROM __schema__.jobs_history_partitions() AS p
        WHERE p.from_at < bin + step AND p.to_at > bin;
        CONTINUE WHEN covered >= step;
        PERFORM pg_advisory_xact_lock(hashtext('pgbaton.history.create'), history_key);
        -- A fresh look, after the lock: another mover may have created them meanwhile.
        gap_from := bin;
        FOR part IN
            SELECT p.from_at, p.to_at FROM __schema__.jobs_history_partitions() AS p
            WHERE p.from_at < bin + step AND p.to_at > bin
            ORDER BY p.from_at
        LOOP
            IF part.from_at > gap_from THEN
                PERFORM __schema__.jobs_history_partition_create(gap_from, part.from_at);
            END IF;
            gap_from := greatest(gap_from, part.to_at);
        END LOOP;
        IF gap_from < bin + step THEN
            PERFORM __schema__.jobs_history_partition_create(gap_from, bin + step);
        END IF;
    END LOOP;
    RETURN coalesce(bins, '{}');
END;
$$;

-- Drops the partitions whose whole range ended more than retention_secs ago,
-- oldest first. A DROP takes ACCESS EXCLUSIVE on jobs_history: with lock_timeout at
-- lock_wait_secs it never queues long behind a reader (and so never holds up the
-- readers queued behind it); a lock not granted ends this run with a row
-- (name, false), and the next run tries again. The movers' shared lock is waited for
-- the same way (a row (NULL, false) when it was not granted).
CREATE FUNCTION __schema__.jobs_history_drop(retention_secs float8, lock_wait_secs float8)
RETURNS TABLE (name text, dropped boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    history_key integer := ('__schema__.jobs_history'::regclass::oid::bigint
                            - 2147483648)::integer;
    part record;
BEGIN
    PERFORM set_config('lock_timeout', ceil(lock_wait_secs * 1000)::bigint::text || 'ms', true);
    BEGIN
        PERFORM pg_advisory_xact_lock(hashtext('pgbaton.history'), history_key);
    EXCEPTION WHEN lock_not_available THEN
        name := NULL;
        dropped := false;
        RETURN NEXT;
        RETURN;
    END;
    FOR part IN
        SELECT p.name FROM __schema__.jobs_history_partitions() AS p
        WHERE p.to_at < now() - make_interval(secs => retention_secs)
        ORDER BY p.from_at
    LOOP
        BEGIN
            EXECUTE format('DROP TABLE __schema__.%I', part.name);
            name := part.name;
            dropped := true;
            RETURN NEXT;
        EXCEPTION WHEN lock_not_available THEN
            name := part.name;
            dropped := false;
            RETURN NEXT;
            RETURN;
        END;
    END LOOP;
END;
$$;
