"""benchmarks/claim_table_drain.py: the prototype of the narrow claim table that it
measures claims and completes as pgbaton's statements do (each job once, the
completion fenced by the claim's token, the finished job on the wide row), and its
statements are derived from today's texts, so a change of those that the tool does not
follow stops it with a message instead of measuring something else."""

from __future__ import annotations

import psycopg
import pytest
from benchmarks import claim_table_drain
from psycopg.types.json import Jsonb

import pgbaton
from pgbaton import _sql

JOBS = 10


def _split_schema(dsn: str, schema: str) -> dict[str, str]:
    queue = pgbaton.Queue(dsn, schema=schema)
    try:
        queue.migrate()
        queue.enqueue_many([{"task": "noop", "args": {"seq": n}} for n in range(JOBS)])
    finally:
        queue.close()
    quoted = f'"{schema}"'
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(claim_table_drain.LAYOUT.format(s=quoted))  # type: ignore[arg-type]
        conn.execute(claim_table_drain.STATE_ROWS.format(s=quoted))  # type: ignore[arg-type]
    return claim_table_drain.split_statements(_sql.queries(schema), quoted)


def _claim(conn: psycopg.Connection, named: dict[str, str], limit: int) -> list[tuple]:
    return conn.execute(named["job_claim_many"], {  # type: ignore[arg-type]
        "after": None, "tasks": None, "limit": limit, "starting": limit, "lease": 30.0,
        "worker_id": "test", "queues": None}).fetchall()


def _complete(conn: psycopg.Connection, named: dict[str, str], rows: list[tuple]) -> int:
    return len(conn.execute(named["job_complete_many"], {  # type: ignore[arg-type]
        "ids": [row[0] for row in rows], "tokens": [row[1] for row in rows],
        "results": [Jsonb({"n": row[0]}) for row in rows], "ran": [0.5] * len(rows)}).fetchall())


def test_the_prototype_claims_each_job_once_and_fences_its_completion(
        dsn: str, schema: str) -> None:
    named = _split_schema(dsn, schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = _claim(conn, named, 6)
        second = _claim(conn, named, 6)
        ids = [row[0] for row in first + second]
        assert len(first) == 6 and len(second) == JOBS - 6
        assert len(set(ids)) == JOBS
        assert _claim(conn, named, 6) == []
        # The payload comes from the wide row: the task and its args.
        assert {row[4] for row in first} == {"noop"}
        assert sorted(row[5]["seq"] for row in first + second) == list(range(JOBS))

        # A stale holder's tokens (another claim's) match nothing: nothing is written.
        stale = [(row[0], second[0][1]) for row in first]
        assert _complete(conn, named, stale) == 0
        assert _complete(conn, named, first) == 6
        # Written once: the same completion again finds no state row.
        assert _complete(conn, named, first) == 0

        done = conn.execute(
            f'SELECT id, status, result, attempts, started_at IS NOT NULL '  # type: ignore[arg-type]
            f'FROM "{schema}".jobs WHERE id = ANY(%s) ORDER BY id', ([r[0] for r in first],)
        ).fetchall()
        assert [(status, result, attempts, started)
                for _, status, result, attempts, started in done] == [
            ("done", {"n": job_id}, 1, True) for job_id, *_ in done]
        state = conn.execute(
            f'SELECT id, status FROM "{schema}".job_state ORDER BY id'  # type: ignore[arg-type]
        ).fetchall()
        assert state == [(row[0], "running") for row in sorted(second)]


def test_a_claim_the_tool_cannot_follow_stops_it_by_name() -> None:
    today = dict(_sql.queries("pgbaton"))
    today["job_claim_many"] = today["job_claim_many"].replace(
        'FROM "pgbaton".jobs AS c\n', 'FROM "pgbaton".jobs AS candidate\n')
    with pytest.raises(RuntimeError, match="today's statement changed"):
        claim_table_drain.split_statements(today, '"pgbaton"')
