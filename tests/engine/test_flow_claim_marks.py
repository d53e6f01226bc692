"""The flow claim past a mark (migration 24; docs/explanation/scaling.md, "A held
xmin"): while some queue is paused or limited, claims go through job_claim_flow, which
reads each queue's range of jobs_queue_claimable. While its claims from the head are
slow, each queue's claim starts past the last job claimed from it, as the plain claim
does; higher priorities still come first, a job that became pending behind the mark is
taken by the next claim from the head, and the queue's limits hold."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton import _sql
from pgbaton.claim_marks import ClaimMarks
from tests.engine.test_claim_marks import Clock, past_the_mark_and_back_to_the_head


def _flow_always_past_marks(queue: pgbaton.Queue, clock: Clock | None = None) -> None:
    """Every flow claim from the head counts as slow, so flow claims go past marks."""
    queue.engine._flow_claim_marks = ClaimMarks(
        slow_head=0.0, clock=clock or Clock(), by_queue=True)


def _running(db: psycopg.Connection[Any], name: str) -> int:
    row = db.execute("SELECT count(*) AS n FROM jobs WHERE queue = %s AND status = 'running'",
                     (name,)).fetchone()
    assert row is not None
    return int(row["n"])


def test_flow_claims_go_past_the_mark_higher_priorities_first_and_the_head_comes_back(
    queue: pgbaton.Queue, db: psycopg.Connection[Any]
):
    clock = Clock()
    _flow_always_past_marks(queue, clock)
    queue.set_concurrency("default", 1000)
    past_the_mark_and_back_to_the_head(queue, db, clock)
    # The plain claim's marks are not the flow claim's: it made none.
    assert queue._claim_marks.after(None, None) is None


def test_flow_claims_past_marks_keep_the_concurrency_limit_and_the_pause(
    queue: pgbaton.Queue, db: psycopg.Connection[Any]
):
    """Claims past marks of two queues, one limited to 4 and one paused for a while: the
    limited queue never holds more than 4, the paused one gives nothing until resumed."""
    _flow_always_past_marks(queue)
    queue.set_concurrency("small", 4)
    queue.enqueue_many([{"task": "noop", "queue": "small"} for _ in range(40)]
                       + [{"task": "noop", "queue": "other"} for _ in range(40)])
    queue.pause("other")
    claimed: list[int] = []
    for _ in range(12):
        claims = queue.claim("w", limit=10)
        assert {c.queue for c in claims} <= {"small"}
        assert _running(db, "small") <= 4
        assert len(claims) == 4 - (_running(db, "small") - len(claims))
        claimed += [c.id for c in claims]
        # Two of the four finish: room for two.
        running = db.execute("SELECT id FROM jobs WHERE queue = 'small' AND status = 'running'"
                             " ORDER BY id LIMIT 2").fetchall()
        for row in running:
            db.execute("DELETE FROM jobs WHERE id = %s", (row["id"],))
    assert claimed == sorted(claimed) and len(claimed) == len(set(claimed))
    assert len(claimed) == 4 + 2 * 11
    queue.resume("other")
    others = queue.claim("w", limit=10)
    assert len([c for c in others if c.queue == "other"]) >= 8
    assert _running(db, "small") <= 4


def _claimable_blocks(
    dsn: str, schema: str, after: str | None, index: str = "jobs_queue_claimable"
) -> int:
    """Blocks of the index that one flow claim fetched (counted in its transaction: the
    claim's statements run inside the function, where EXPLAIN does not see them),
    rolled back."""
    text = _sql.queries(schema)["job_claim_flow"]
    params = {"worker_id": "measure", "limit": 10, "lease": 30.0, "queues": None,
              "tasks": None, "finished": None, "starting": 10, "after": after}
    fetched = f"SELECT pg_stat_get_xact_blocks_fetched('{index}'::regclass) AS n"
    with psycopg.connect(dsn) as conn:
        conn.execute(f'SET search_path = "{schema}"')
        [[before]] = conn.execute(fetched).fetchall()
        rows = conn.execute(text, params).fetchall()  # type: ignore[call-overload]
        [[done]] = conn.execute(fetched).fetchall()
        conn.rollback()
    assert len([r for r in rows if r[0] is not None]) == 10
    return int(done) - int(before)


@pytest.mark.fresh_schema
def test_under_a_held_xmin_the_flow_claim_past_its_mark_skips_the_dead_head(
    queue: pgbaton.Queue, dsn: str, schema: str, db: psycopg.Connection[Any]
):
    _flow_always_past_marks(queue)
    queue.set_concurrency("default", 1000)
    queue.enqueue_many([{"task": "noop"} for _ in range(8000)])
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT txid_current()")  # and the transaction stays open
        for _ in range(60):
            claims = queue.claim("w", limit=100)
            assert len(claims) == 100
            queue.complete_many([(c, None) for c in claims])
        assert _running(db, "default") == 0
        after = queue.engine._flow_claim_marks.after(None, None)
        assert after is not None
        past_mark = _claimable_blocks(dsn, schema, after)
        from_head = _claimable_blocks(dsn, schema, None)
        holder.rollback()
    # 6,000 dead entries at the queue's head, none of which the holder lets go.
    assert past_mark * 5 < from_head, (past_mark, from_head)


@pytest.mark.fresh_schema
def test_under_a_held_xmin_an_unlimited_queue_counts_no_held_jobs(
    queue: pgbaton.Queue, dsn: str, schema: str
):
    """Another queue paused, so the flow claim serves this one, which has no concurrency
    limit: it reads no held count in jobs_held, whose dead entries (one per job claimed
    since the hold) a count from its head would read."""
    queue.pause("other")
    queue.enqueue_many([{"task": "noop"} for _ in range(5000)])
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT txid_current()")
        for _ in range(40):
            claims = queue.claim("w", limit=100)
            assert len(claims) == 100
            queue.complete_many([(c, None) for c in claims])
        # The ten claimed write ten entries; a count would read the 4,000 dead ones too.
        held = _claimable_blocks(dsn, schema, None, index="jobs_held")
        holder.rollback()
    assert held < 30, held
