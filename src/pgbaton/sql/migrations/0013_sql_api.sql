-- The SQL API, contract version 1 (docs/reference/sql.md, "The SQL API"): enqueue and
-- enqueue_many, so that a trigger, psql or a program in any language enqueues with the
-- Python path's checks and wake-up. Functions, not documented INSERTs: the checks and
-- the defaults then live in one place, and the table may change behind them.

-- The checks of one job, the Python path's (_checks.job_params, limits.py): each
-- refusal names the value and what is wrong, and raises before anything is written.
-- `job_position`: the job's place in enqueue_many's array (from 0), named in the message;
-- NULL for enqueue. Every option is given here with its default filled in.
CREATE FUNCTION __schema__.job_enqueue_check(
    job_position integer, task text, args jsonb, queue text, priority integer,
    run_at timestamptz, delay float8, key text, idempotency_key text, max_attempts integer,
    limit_key text
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    place text := CASE WHEN job_position IS NULL THEN 'enqueue: '
                       ELSE format('enqueue_many: job %s: ', job_position) END;
    args_bytes integer;
    name_value text;
    name_field text;
    what text;
BEGIN
    IF task IS NULL OR task = '' THEN
        RAISE EXCEPTION '%task must be a non-empty string, got %', place,
            coalesce(quote_literal(task), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH name_field IN ARRAY ARRAY['task', 'queue'] LOOP
        name_value := CASE name_field WHEN 'task' THEN task ELSE queue END;
        what := place || name_field;
        IF name_value = '' THEN
            RAISE EXCEPTION '% must be a non-empty string', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- MAX_NAME_BYTES: a queue name is a NOTIFY payload, a task name an index entry.
        IF octet_length(name_value) > 255 THEN
            RAISE EXCEPTION '% is % bytes long, over pgbaton''s limit of 255: %...', what,
                octet_length(name_value), quote_literal(left(name_value, 40))
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF jsonb_typeof(args) <> 'object' THEN
        RAISE EXCEPTION '%args for task % must be a JSON object (the handler''s keyword '
            'arguments), got % %', place, quote_literal(task), CASE jsonb_typeof(args)
            WHEN 'array' THEN 'an array' ELSE 'a ' || jsonb_typeof(args) END, left(args::text, 40)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- MAX_ARGS_BYTES, measured as the Python path measures it: the JSON text.
    args_bytes := octet_length(args::text);
    IF args_bytes > 16777216 THEN
        RAISE EXCEPTION '%args for task % are % bytes as JSON, over pgbaton''s limit of '
            '16,777,216: keep large data in a table and pass its id', place,
            quote_literal(task), args_bytes USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- MAX_JSON_DEPTH (200 levels): the worker's JSON decoder must read back what is
    -- stored. A document of fewer than 402 characters cannot nest that deep.
    IF args_bytes > 400 AND jsonb_path_exists(
            args, 'strict $.**{200} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION '%args for task % are nested too deeply (more than 200 levels)',
            place, quote_literal(task) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Python reads a whole number of more than 4,300 digits as an error, which would
    -- break every claim that fetched the job (the Python path cannot write one).
    IF args_bytes > 4300 AND jsonb_path_exists(
            args, 'strict $.** ? (@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))') THEN
        RAISE EXCEPTION '%args for task % hold a number of more than 4,300 digits, which '
            'Python cannot read back: pass it as a string', place, quote_literal(task)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF run_at IS NOT NULL AND delay IS NOT NULL THEN
        RAISE EXCEPTION '%give run_at or delay, not both', place
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- EARLIEST_RUN_AT and MAX_SECONDS (ten years of 365.25 days).
    IF run_at IS NOT NULL AND NOT (run_at >= '1970-01-01 00:00:00+00'
                                   AND run_at <= now() + interval '3652.5 days') THEN
        RAISE EXCEPTION '%run_at must lie between 1970-01-01 and ten years from now (the '
            'same bound as delay), got %', place, run_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF delay IS NOT NULL AND NOT (delay >= 0 AND delay <= 315576000) THEN
        RAISE EXCEPTION '%delay must be a >= 0 number of seconds, at most ten years, got %',
            place, delay USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH name_field IN ARRAY ARRAY['key', 'idempotency_key', 'limit_key'] LOOP
        name_value := CASE name_field WHEN 'key' THEN key
                      WHEN 'idempotency_key' THEN idempotency_key ELSE limit_key END;
        what := place || name_field;
        IF name_value = '' THEN
            RAISE EXCEPTION '% must be a non-empty string or NULL', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- MAX_KEY_BYTES: below a B-tree entry's ceiling, with the index's other columns.
        IF octet_length(name_value) > 2048 THEN
            RAISE EXCEPTION '% is % bytes long, over pgbaton''s limit of 2,048: %...',
                what, octet_length(name_value), quote_literal(left(name_value, 40))
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF max_attempts < 1 THEN
        RAISE EXCEPTION '%max_attempts must be a whole number from 1 to 2147483647, got %',
            place, max_attempts USING ERRCODE = 'invalid_parameter_value';
    END IF;
END;
$$;

-- One job; returns its id. A NULL option means its default, as an option left out
-- does. An idempotency key that a job of the same task has already returns that job's
-- id. The insert trigger wakes the workers at commit, as for a job enqueued from Python.
CREATE FUNCTION __schema__.enqueue(
    task text, args jsonb DEFAULT '{}', queue text DEFAULT 'default',
    priority integer DEFAULT 0, run_at timestamptz DEFAULT NULL, delay float8 DEFAULT NULL,
    key text DEFAULT NULL, idempotency_key text DEFAULT NULL, max_attempts integer DEFAULT 5,
    limit_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    new_id bigint;
    holder record;
BEGIN
    args := coalesce(args, '{}');
    queue := coalesce(queue, 'default');
    priority := coalesce(priority, 0);
    max_attempts := coalesce(max_attempts, 5);
    PERFORM __schema__.job_enqueue_check(NULL, task, args, queue, priority, run_at, delay,
                                         key, idempotency_key, max_attempts, limit_key);
    IF idempotency_key IS NULL THEN
        INSERT INTO __schema__.jobs AS j
            (queue, task, args, priority, run_at, key, max_attempts, limit_key)
        VALUES (queue, task, args, priority,
                coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
                key, max_attempts, limit_key)
        RETURNING j.id INTO new_id;
        RETURN new_id;
    END IF;
    -- As job_insert_idempotent: ON CONFLICT names no index, so a key held in the
    -- previous release's global index by another task's job is found and named.
    INSERT INTO __schema__.jobs AS j
        (queue, task, args, priority, run_at, key, idempotency_key, max_attempts, limit_key)
    VALUES (queue, task, args, priority,
            coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
            key, idempotency_key, max_attempts, limit_key)
    ON CONFLICT DO NOTHING
    RETURNING j.id INTO new_id;
    IF new_id IS NOT NULL THEN
        RETURN new_id;
    END IF;
    SELECT j.id INTO new_id FROM __schema__.jobs AS j
    WHERE j.task = enqueue.task AND j.idempotency_key = enqueue.idempotency_key;
    IF new_id IS NOT NULL THEN
        RETURN new_id;
    END IF;
    SELECT j.id, j.task INTO holder FROM __schema__.jobs AS j
    WHERE j.idempotency_key = enqueue.idempotency_key ORDER BY j.id LIMIT 1;
    RAISE EXCEPTION 'enqueue: idempotency_key % is taken by job % of task %: while the '
        'schema keeps the previous release''s global index, a key cannot be reused across '
        'tasks', quote_literal(idempotency_key), holder.id, quote_literal(holder.task)
        USING ERRCODE = 'unique_violation';
END;
$$;

-- Many jobs from one JSON array of objects, each with enqueue's fields (only "task"
-- is required; run_at as an ISO 8601 text with its UTC offset, delay in seconds);
-- returns their ids in input order. Every job is checked before any is written, and
-- they are written by one INSERT, so one wake-up per queue at commit.
CREATE FUNCTION __schema__.enqueue_many(jobs jsonb) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    job jsonb;
    job_position integer := -1;
    fields constant text[] := ARRAY['task', 'args', 'queue', 'priority', 'run_at', 'delay',
                                    'key', 'idempotency_key', 'max_attempts', 'limit_key'];
    kinds constant text[] := ARRAY['string', 'object', 'string', 'number', 'string',
                                   'number', 'string', 'string', 'number', 'string'];
    unknown text[];
    field integer;
    whole text;
    found_id bigint;
    number numeric;
    run_at_given timestamptz;
    queues text[] := '{}';
    tasks text[] := '{}';
    argses jsonb[] := '{}';
    priorities integer[] := '{}';
    run_ats timestamptz[] := '{}';
    delays float8[] := '{}';
    keys text[] := '{}';
    idempotency_keys text[] := '{}';
    attempts integer[] := '{}';
    limit_keys text[] := '{}';
    ids bigint[];
    missing integer;
    holder record;
BEGIN
    IF jsonb_typeof(jobs) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'enqueue_many takes a JSON array of jobs, got %',
            coalesce(left(jobs::text, 40), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR job IN SELECT value FROM jsonb_array_elements(jobs) LOOP
        job_position := job_position + 1;
        IF jsonb_typeof(job) <> 'object' OR NOT job ? 'task' THEN
            RAISE EXCEPTION 'enqueue_many: job % must be a JSON object with a "task", got %',
                job_position, left(job::text, 40) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        unknown := ARRAY(SELECT k FROM jsonb_object_keys(job) AS k
                         WHERE k <> ALL(fields) ORDER BY k);
        IF cardinality(unknown) > 0 THEN
            RAISE EXCEPTION 'enqueue_many: job % has unknown fields %; allowed: %', job_position,
                unknown, array_to_string(fields, ', ')
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        FOR field IN 1 .. cardinality(fields) LOOP
            IF jsonb_typeof(job -> fields[field]) NOT IN (kinds[field], 'null')
               AND fields[field] <> 'args' THEN  -- args: the common check names it
                RAISE EXCEPTION 'enqueue_many: job %: % must be a JSON % or null, got %',
                    job_position, fields[field], kinds[field], left((job -> fields[field])::text, 40)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END LOOP;
        FOREACH whole IN ARRAY ARRAY['priority', 'max_attempts'] LOOP
            number := (job ->> whole)::numeric;
            IF number <> trunc(number) OR number < -2147483648 OR number > 2147483647 THEN
                RAISE EXCEPTION 'enqueue_many: job %: % must be a whole number from '
                    '-2147483648 to 2147483647, got %', job_position, whole, number
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END LOOP;
        number := (job ->> 'delay')::numeric;
        IF number < 0 OR number > 315576000 THEN
            RAISE EXCEPTION 'enqueue_many: job %: delay must be a >= 0 number of seconds, '
                'at most ten years, got %', job_position, number
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        run_at_given := NULL;
        IF job ? 'run_at' AND jsonb_typeof(job -> 'run_at') = 'string' THEN
            -- A time without its offset would be read in the session's time zone: the
            -- Python path refuses a naive datetime for the same reason.
            IF job ->> 'run_at' !~ ('^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]+)?)?'
                                   || '([Zz]|[+-][0-9]{2}(:?[0-9]{2})?)$') THEN
                RAISE EXCEPTION 'enqueue_many: job %: run_at must be an ISO 8601 time with '
                    'its UTC offset (2030-01-01T09:00:00+00:00), got %', job_position,
                    quote_literal(left(job ->> 'run_at', 40))
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            BEGIN
                run_at_given := (job ->> 'run_at')::timestamptz;
            EXCEPTION WHEN data_exception THEN
                RAISE EXCEPTION 'enqueue_many: job %: run_at is not a time: %', job_position,
                    quote_literal(left(job ->> 'run_at', 40))
                    USING ERRCODE = 'invalid_parameter_value';
            END;
        END IF;
        PERFORM __schema__.job_enqueue_check(
            job_position, job ->> 'task', coalesce(nullif(job -> 'args', 'null'), '{}'),
            coalesce(job ->> 'queue', 'default'), coalesce((job ->> 'priority')::numeric::integer, 0),
            run_at_given, (job ->> 'delay')::float8, job ->> 'key', job ->> 'idempotency_key',
            coalesce((job ->> 'max_attempts')::numeric::integer, 5), job ->> 'limit_key');
        tasks := tasks || (job ->> 'task');
        argses := argses || coalesce(nullif(job -> 'args', 'null'), '{}');
        queues := queues || coalesce(job ->> 'queue', 'default');
        priorities := priorities || coalesce((job ->> 'priority')::numeric::integer, 0);
        run_ats := run_ats || run_at_given;
        delays := delays || (job ->> 'delay')::float8;
        keys := keys || (job ->> 'key');
        idempotency_keys := idempotency_keys || (job ->> 'idempotency_key');
        attempts := attempts || coalesce((job ->> 'max_attempts')::numeric::integer, 5);
        limit_keys := limit_keys || (job ->> 'limit_key');
    END LOOP;
    -- As job_insert_many: the ids drawn first, in input order, so each is matched to its
    -- position; ON CONFLICT DO NOTHING as in enqueue.
    WITH input AS (
        SELECT nextval('__schema__.jobs_id_seq') AS id, t.*
        FROM unnest(queues, tasks, argses, priorities, run_ats, delays, keys,
                    idempotency_keys, attempts, limit_keys)
             WITH ORDINALITY AS t(queue, task, args, priority, run_at, delay, key,
                                  idempotency_key, max_attempts, limit_key, n)
    ),
    inserted AS (
        INSERT INTO __schema__.jobs AS j
            (id, queue, task, args, priority, run_at, key, idempotency_key, max_attempts,
             limit_key)
        SELECT i.id, i.queue, i.task, i.args, i.priority,
               coalesce(i.run_at, now() + make_interval(secs => coalesce(i.delay, 0))),
               i.key, i.idempotency_key, i.max_attempts, i.limit_key
        FROM input AS i ORDER BY i.n
        ON CONFLICT DO NOTHING
        RETURNING j.id
    )
    SELECT array_agg(inserted.id ORDER BY input.n) INTO ids
    FROM input LEFT JOIN inserted ON inserted.id = input.id;
    IF ids IS NULL THEN
        RETURN '{}';
    END IF;
    -- A job whose key its task's job has (an earlier one of this array, too) gets
    -- that job's id.
    FOR missing IN SELECT n FROM unnest(ids) WITH ORDINALITY AS u(id, n) WHERE u.id IS NULL
    LOOP
        SELECT j.id INTO found_id FROM __schema__.jobs AS j
        WHERE j.task = tasks[missing] AND j.idempotency_key = idempotency_keys[missing];
        ids[missing] := found_id;
        IF found_id IS NULL THEN
            SELECT j.id, j.task INTO holder FROM __schema__.jobs AS j
            WHERE j.idempotency_key = idempotency_keys[missing] ORDER BY j.id LIMIT 1;
            RAISE EXCEPTION 'enqueue_many: job %: idempotency_key % is taken by job % of '
                'task %: while the schema keeps the previous release''s global index, a key '
                'cannot be reused across tasks; nothing was written', missing - 1,
                quote_literal(idempotency_keys[missing]), holder.id, quote_literal(holder.task)
                USING ERRCODE = 'unique_violation';
        END IF;
    END LOOP;
    RETURN ids;
END;
$$;

-- Waiting for a job's end (App.wait, docs/howto/waiting.md). A waiter marks the job
-- awaited (job_await), and only an awaited job's end sends a NOTIFY on the schema's
-- `<schema>_ended` channel, its id the payload: a job nobody waits for costs the
-- trigger's WHEN test and no more. The mark takes the row's lock, so a completion in
-- flight is either committed before it (the mark finds the job ended) or sees it (and
-- notifies).
ALTER TABLE __schema__.jobs ADD COLUMN awaited boolean NOT NULL DEFAULT false;
-- jobs_history keeps jobs' columns in their order (LIKE: NOT NULL, no default), and
-- the NOT NULL's name that LIKE copies from jobs (PostgreSQL 18 names them).
ALTER TABLE __schema__.jobs_history
    ADD COLUMN awaited boolean CONSTRAINT jobs_awaited_not_null NOT NULL DEFAULT false;
ALTER TABLE __schema__.jobs_history ALTER COLUMN awaited DROP DEFAULT;

CREATE FUNCTION __schema__.jobs_notify_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_ended',
                      (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END)::text);
    RETURN NULL;
END;
$$;

-- Every way a job ends (complete, fail, reap, cancel, a parent's cascade, the
-- operator's actions) sets status, so one trigger hears them all.
CREATE TRIGGER jobs_notify_ended
    AFTER UPDATE OF status ON __schema__.jobs
    FOR EACH ROW
    WHEN (NEW.awaited AND NEW.status IN ('done', 'failed', 'cancelled')
          AND OLD.status NOT IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION __schema__.jobs_notify_ended();

-- An awaited job deleted before its end: its waiters learn that it is gone.
CREATE TRIGGER jobs_notify_ended_by_delete
    AFTER DELETE ON __schema__.jobs
    FOR EACH ROW
    WHEN (OLD.awaited AND OLD.status NOT IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION __schema__.jobs_notify_ended();
