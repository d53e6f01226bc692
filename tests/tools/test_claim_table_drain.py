"""benchmarks/claim_table_drain.py: the prototype of the narrow claim table that it
measures claims and completes as pgbaton's statements do (each job once, the
completion fenced by the claim's token, the finished job on the wide row), the wide
table it leaves can take a completion as a HOT update, the price arms' completions are
fenced too and move a job whole, and its statements are derived from today's texts, so
a change of those that the tool does not follow stops it with a message instead of
measuring something else."""

from __future__ import annotations

import re

import psycopg
import pytest
from benchmarks import claim_table_drain
from psycopg.types.json import Jsonb

import pgbaton
from pgbaton import _sql

JOBS = 10
# What the prototype's completion changes on the wide row.
COMPLETION_WRITES = ("status", "result", "finished_at", "started_at", "attempts", "holds",
                     "worker_id", "waiting_event")


def _migrated(dsn: str, schema: str) -> None:
    queue = pgbaton.Queue(dsn, schema=schema)
    try:
        queue.migrate()
        queue.enqueue_many([{"task": "noop", "args": {"seq": n}} for n in range(JOBS)])
    finally:
        queue.close()


def _split_schema(dsn: str, schema: str) -> dict[str, str]:
    _migrated(dsn, schema)
    quoted = f'"{schema}"'
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(claim_table_drain.LAYOUT.format(s=quoted))  # type: ignore[arg-type]
        conn.execute(claim_table_drain.STATE_ROWS.format(s=quoted))  # type: ignore[arg-type]
    return claim_table_drain.split_statements(_sql.queries(schema), quoted)


def _claim(conn: psycopg.Connection, named: dict[str, str], limit: int) -> list[tuple]:
    return conn.execute(named["job_claim_many"], {  # type: ignore[arg-type]
        "after": None, "tasks": None, "limit": limit, "starting": limit, "lease": 30.0,
        "worker_id": "test", "queues": None}).fetchall()


def _complete(conn: psycopg.Connection, statement: str, rows: list[tuple]) -> int:
    return len(conn.execute(statement, {  # type: ignore[arg-type]
        "ids": [row[0] for row in rows], "tokens": [row[1] for row in rows],
        "results": [Jsonb({"n": row[0]}) for row in rows],
        "ran": [0.5] * len(rows)}).fetchall())


def test_the_prototype_claims_each_job_once_and_fences_its_completion(
        dsn: str, schema: str) -> None:
    named = _split_schema(dsn, schema)
    complete = named["job_complete_many"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = _claim(conn, named, 6)
        second = _claim(conn, named, 6)
        ids = [row[0] for row in first + second]
        assert len(first) == 6 and len(second) == JOBS - 6
        assert len(set(ids)) == JOBS
        assert _claim(conn, named, 6) == []
        # The args come from the wide row (the task is the state row's own).
        assert sorted(row[5]["seq"] for row in first + second) == list(range(JOBS))

        # A stale holder's tokens (another claim's) match nothing: nothing is written.
        stale = [(row[0], second[0][1]) for row in first]
        assert _complete(conn, complete, stale) == 0
        assert _complete(conn, complete, first) == 6
        # Written once: the same completion again finds no state row.
        assert _complete(conn, complete, first) == 0

        done = conn.execute(
            f'SELECT id, status, result, attempts, started_at IS NOT NULL '  # type: ignore[arg-type]
            f'FROM "{schema}".jobs WHERE status = %s ORDER BY id', ("done",)
        ).fetchall()
        assert [row[0] for row in done] == sorted(row[0] for row in first)
        assert [row[1:] for row in done] == [
            ("done", {"n": job_id}, 1, True) for job_id, *_ in done]
        state = conn.execute(
            f'SELECT id, status FROM "{schema}".job_state ORDER BY id'  # type: ignore[arg-type]
        ).fetchall()
        assert state == [(row[0], "running") for row in sorted(second)]


def test_no_index_left_on_jobs_names_what_the_completion_writes(
        dsn: str, schema: str) -> None:
    """The HOT figures rest on it: an index that names a column the completion changes,
    in its key or its predicate, makes every completion a non-HOT update."""
    _split_schema(dsn, schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        indexes = conn.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index AS i "
            "JOIN pg_class AS c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = format('%%I.jobs', %s::text)::regclass", (schema,)
        ).fetchall()
    assert indexes
    for name, definition in indexes:
        named = set(re.findall(r"[a-z_]+", definition.split(" USING ", 1)[1]))
        assert not named & set(COMPLETION_WRITES), (name, definition)


@pytest.mark.parametrize("arm", ["deleting", "moving"])
def test_the_price_arms_completions_are_fenced_and_take_the_job_whole(
        dsn: str, schema: str, arm: str) -> None:
    _migrated(dsn, schema)
    quoted = f'"{schema}"'
    today = _sql.queries(schema)
    complete = claim_table_drain.COMPLETIONS[arm].format(
        s=quoted, columns=claim_table_drain.MOVED_COLUMNS)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if arm == "moving":
            conn.execute(claim_table_drain.MOVING_HISTORY.format(s=quoted))  # type: ignore[arg-type]
            columns = conn.execute(
                "SELECT string_agg(attname, ', ' ORDER BY attnum) FROM pg_attribute "
                "WHERE attrelid = format('%%I.jobs_history', %s::text)::regclass "
                "AND attnum > 0 AND NOT attisdropped", (schema,)).fetchone()
            assert columns == (claim_table_drain.MOVED_COLUMNS,)
        rows = _claim(conn, today, 4)
        assert _complete(conn, complete, [(row[0], rows[-1][1]) for row in rows[:-1]]) == 0
        assert _complete(conn, complete, rows) == 4
        assert _complete(conn, complete, rows) == 0
        left = conn.execute(
            f'SELECT count(*) FROM "{schema}".jobs').fetchone()  # type: ignore[arg-type]
        assert left == (JOBS - 4,)
        if arm == "moving":
            moved = conn.execute(
                f'SELECT id, status, result, args, claim_token, started_at IS NOT NULL '  # type: ignore[arg-type]
                f'FROM "{schema}".jobs_history ORDER BY id').fetchall()
            assert moved == [(row[0], "done", {"n": row[0]}, row[5], None, True)
                             for row in sorted(rows)]


@pytest.mark.parametrize(("old", "new", "message"), [
    ('FROM "pgbaton".jobs AS c\n', 'FROM "pgbaton".jobs AS candidate\n',
     "today's statement changed"),
    ("waiting_event = NULL,", "waiting_event = waiting_event,", "waiting_event"),
    ("j.meta, j.started_at IS NOT NULL AS started", "j.meta, j.key AS started",
     "RETURNING_TODAY"),
])
def test_a_claim_the_tool_cannot_follow_stops_it_by_name(
        old: str, new: str, message: str) -> None:
    today = dict(_sql.queries("pgbaton"))
    assert old in today["job_claim_many"]
    today["job_claim_many"] = today["job_claim_many"].replace(old, new)
    with pytest.raises(RuntimeError, match=message):
        claim_table_drain.split_statements(today, '"pgbaton"')
