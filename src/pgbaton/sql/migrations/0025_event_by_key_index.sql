-- Functions only, no lock on the table (docs/explanation/guarantees.md, "Rolling
-- deploys"): send_event_by_key finds the key's unfinished jobs through the partial
-- indexes of unfinished keyed jobs instead of reading the whole table. Its one
-- `status IN ('pending', 'running', 'waiting')` implied neither jobs_key_unfinished's
-- predicate (pending, running) nor jobs_key_waiting's (waiting), so every call was a
-- sequential scan of jobs, finished rows and all. Split along the two predicates, the
-- test is a BitmapOr of the two indexes, by key. The same jobs, locked in the same order,
-- and the same error when there are none.

CREATE OR REPLACE FUNCTION __schema__.send_event_by_key(key text, name text, payload jsonb DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    ids bigint[];
    one bigint;
BEGIN
    -- Locked in id order, as send_event would lock them one by one: a job that ends
    -- meanwhile is passed over, not refused. The status test names each partial
    -- index's own predicate, pending and running (jobs_key_unfinished) or waiting
    -- (jobs_key_waiting), so the planner reads both by key (one IN of the three states
    -- implies neither, and reads the whole table: migration 25).
    SELECT coalesce(array_agg(held.id ORDER BY held.id), '{}') INTO ids
    FROM (SELECT j.id FROM __schema__.jobs AS j
          WHERE j.key = send_event_by_key.key
            AND (j.status IN ('pending', 'running') OR j.status = 'waiting')
          ORDER BY j.id FOR UPDATE) AS held;
    IF cardinality(ids) = 0 THEN
        RAISE EXCEPTION 'send_event_by_key: no unfinished job has key % (event %)',
            coalesce(quote_literal(key), 'NULL'), coalesce(quote_literal(name), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
    FOREACH one IN ARRAY ids LOOP
        PERFORM __schema__.send_event(one, name, payload);
    END LOOP;
    RETURN ids;
END;
$$;
