"""The claim past a mark (claim_marks.py; docs/explanation/scaling.md, "A held xmin"):
while claims from the head are slow, a queue's claim starts past the last job it
claimed; higher priorities still come first, and a job that became pending behind the
mark is taken by the next claim from the head, which comes at a pace its own length
sets. Under a held xmin the claim past its mark reads a handful of buffers where the
claim from the head reads every dead entry."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton import _sql
from pgbaton.claim_marks import (
    CLAIM_HEAD_SECONDS,
    HEAD_COST_SHARE,
    MAX_HEAD_INTERVAL_SECONDS,
    MAX_QUEUE_MARKS,
    SLOW_HEAD_READS,
    ClaimMarks,
)
from pgbaton.models import Claim


class Clock:
    """The marks' monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _always_past_marks(queue: pgbaton.Queue, clock: Clock | None = None) -> None:
    """Every claim from the head counts as slow, so claims go past their marks."""
    queue._claim_marks = ClaimMarks(slow_head=0.0, clock=clock or Clock())


def test_claims_go_past_the_mark_higher_priorities_first_and_the_head_comes_back(
    queue: pgbaton.Queue, db: psycopg.Connection[Any]
):
    clock = Clock()
    _always_past_marks(queue, clock)
    past_the_mark_and_back_to_the_head(queue, db, clock)


def past_the_mark_and_back_to_the_head(
    queue: pgbaton.Queue, db: psycopg.Connection[Any], clock: Clock
) -> None:
    """Claims of 30 jobs of one queue, every claim from the head counted as slow: a
    higher priority comes first, the rest past the mark, and a job made pending behind
    it waits for the next claim from the head (the flow claim's test runs it too)."""
    queue.enqueue_many([{"task": "noop"} for _ in range(30)])
    assert [c.id for c in queue.claim("w", limit=10)] == list(range(1, 11))

    urgent = queue.enqueue("urgent", priority=5)
    # The higher priority from its head first, then the mark's priority past the mark.
    assert [c.id for c in queue.claim("w", limit=5)] == [urgent, 11, 12, 13, 14]

    # Job 3 pending again behind the mark, as the reaper leaves an expired lease.
    db.execute("UPDATE jobs SET status = 'pending', claim_token = NULL, lease_until = NULL,"
               " started_at = NULL WHERE id = 3")
    assert [c.id for c in queue.claim("w", limit=5)] == [15, 16, 17, 18, 19]
    rest = queue.claim("w", limit=100)  # past the mark: the backlog is gone
    assert [c.id for c in rest] == list(range(20, 31))
    # Short claims do not bring the slow head back: it comes once its time is due.
    clock.now += CLAIM_HEAD_SECONDS / 2
    assert queue.claim("w", limit=100) == []
    clock.now += CLAIM_HEAD_SECONDS / 2
    assert [c.id for c in queue.claim("w", limit=100)] == [3]
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'pending'"
                      ).fetchone() == {"n": 0}


def test_a_claim_from_a_slow_head_waits_ten_times_its_own_length():
    """SLOW_HEAD_READS (3) slow claims from the head in a row (one or two may be a stall)
    send claims past the mark; the claims from a slow head take at most HEAD_COST_SHARE
    of the queue's time: the next comes CLAIM_HEAD_SECONDS after the last, or its length
    / HEAD_COST_SHARE if that is longer, at most MAX_HEAD_INTERVAL_SECONDS. Once a claim
    from the head is quick, every claim reads from the head again."""
    clock = Clock()
    marks = ClaimMarks(clock=clock)
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    claim = Claim(id=7, token=uuid.uuid4(), attempts=1, max_attempts=3, task="t", args={},
                  key=None, queue="default", priority=0, lease_until=at, created_at=at,
                  run_at=at)
    assert marks.after(None, None) is None
    marks.claimed(None, None, after=None, claims=[claim], seconds=0.001)  # quick
    assert marks.after(None, None) is None
    marks.claimed(None, None, after=None, claims=[claim], seconds=0.5)  # a slow head
    assert marks.after(None, None) is None  # once may be a stall: read it again
    marks.claimed(None, None, after=None, claims=[claim], seconds=0.5)  # slow again
    assert marks.after(None, None) is None  # twice may be a busy machine
    marks.claimed(None, None, after=None, claims=[claim], seconds=0.001)  # quick: reset
    for _ in range(SLOW_HEAD_READS - 1):
        marks.claimed(None, None, after=None, claims=[claim], seconds=0.5)
        assert marks.after(None, None) is None
    marks.claimed(None, None, after=None, claims=[claim], seconds=0.5)  # the third
    started = clock.now
    while clock.now < started + 0.5 / HEAD_COST_SHARE - 0.01:
        assert marks.after(None, None) is not None, clock.now - started
        clock.now += 0.25
    clock.now = started + 0.5 / HEAD_COST_SHARE
    assert marks.after(None, None) is None
    marks.claimed(None, None, after=None, claims=[claim], seconds=0.002)  # vacuumed
    assert marks.after(None, None) is None
    # A head that takes 10 s is read again after MAX_HEAD_INTERVAL_SECONDS, not 100 s.
    for _ in range(SLOW_HEAD_READS - 1):
        marks.claimed(None, None, after=None, claims=[claim], seconds=10.0)
        assert marks.after(None, None) is None
    marks.claimed(None, None, after=None, claims=[claim], seconds=10.0)
    started = clock.now
    clock.now = started + MAX_HEAD_INTERVAL_SECONDS - 0.01
    assert marks.after(None, None) is not None
    clock.now = started + MAX_HEAD_INTERVAL_SECONDS
    assert marks.after(None, None) is None


def test_a_plain_queue_claims_from_the_head_while_its_claims_are_fast(
    queue: pgbaton.Queue, db: psycopg.Connection[Any]
):
    """Below SLOW_HEAD_SECONDS every claim reads from the head: a job behind the last
    one claimed keeps its place in the claim order."""
    queue.enqueue_many([{"task": "noop"} for _ in range(30)])
    assert [c.id for c in queue.claim("w", limit=10)] == list(range(1, 11))
    db.execute("UPDATE jobs SET status = 'pending', claim_token = NULL, lease_until = NULL,"
               " started_at = NULL WHERE id = 3")
    assert [c.id for c in queue.claim("w", limit=5)] == [3, 11, 12, 13, 14]


def _claim_buffers(dsn: str, schema: str, after: str | None) -> int:
    """Buffers the claim's candidate scan (its LockRows and below) touched."""
    text = _sql.queries(schema)["job_claim_many"]
    params = {"worker_id": "explain", "limit": 10, "lease": 30.0, "queues": None,
              "tasks": None, "starting": 10, "after": after}
    with psycopg.connect(dsn) as conn:
        [[plan]] = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text,  # type: ignore[operator]
            params).fetchall()
        conn.rollback()
    return sum(int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])
               for node in _nodes(plan[0]["Plan"]) if node["Node Type"] == "LockRows")


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


@pytest.mark.fresh_schema
def test_under_a_held_xmin_the_claim_past_its_mark_skips_the_dead_head(
    queue: pgbaton.Queue, dsn: str, schema: str
):
    _always_past_marks(queue)
    # 8,000 claimed under the hold: with 4,000 the claim from the head read 122 to 130
    # buffers against 19 to 26 past the mark on PostgreSQL 18, too near the test's 5x.
    queue.enqueue_many([{"task": "noop"} for _ in range(9000)])
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT txid_current()")  # and the transaction stays open
        for _ in range(80):
            assert len(queue.claim("w", limit=100)) == 100
        after = queue._claim_marks.after(None, None)
        assert after is not None
        past_mark = _claim_buffers(dsn, schema, after)
        from_head = _claim_buffers(dsn, schema, None)
        holder.rollback()
    # 8,000 dead entries at the head: the claim from it reads the pages of their rows.
    assert past_mark * 5 < from_head, (past_mark, from_head)


def _claim_of(queue: str, job_id: int) -> Claim:
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return Claim(id=job_id, token=uuid.uuid4(), attempts=1, max_attempts=3, task="t",
                 args={}, key=None, queue=queue, priority=0, lease_until=at,
                 created_at=at, run_at=at)


def _slow_head(marks: ClaimMarks, claims: list[Claim], seconds: float = 0.5) -> None:
    """A quick claim from the head (the quickest so far), then SLOW_HEAD_READS slow."""
    assert marks.after(None, None) is None
    marks.claimed(None, None, after=None, claims=[], seconds=0.001)
    for _ in range(SLOW_HEAD_READS):
        assert marks.after(None, None) is None
        marks.claimed(None, None, after=None, claims=claims, seconds=seconds)


def test_a_flow_claim_keeps_the_marks_of_its_latest_queues_only():
    """The flow claim serves every queue it has a mark of, at every claim: one queue
    per tenant would make each claim past the marks read thousands of queues (slower
    than the head it avoids). It keeps the MAX_QUEUE_MARKS queues it claimed from last;
    the others are read from their head."""
    marks = ClaimMarks(clock=Clock(), by_queue=True)
    _slow_head(marks, [_claim_of(f"tenant-{n:04}", n) for n in range(1, 1001)])
    after = marks.after(None, None)
    assert after is not None
    kept = json.loads(after)["queues"]
    assert sorted(kept) == [f"tenant-{n:04}" for n in range(1001 - MAX_QUEUE_MARKS, 1001)]
    # A queue claimed from again is the latest: it stays as newer ones come.
    marks.claimed(None, None, after=after, claims=[_claim_of("tenant-0990", 2000)],
                  seconds=0.001)
    marks.claimed(None, None, after=after,
                  claims=[_claim_of(f"new-{n}", 3000 + n) for n in range(MAX_QUEUE_MARKS - 1)],
                  seconds=0.001)
    kept = json.loads(marks.after(None, None) or "{}")["queues"]
    assert "tenant-0990" in kept and len(kept) == MAX_QUEUE_MARKS
    assert kept["tenant-0990"][2] == 2000


def test_claims_past_marks_slower_than_the_head_go_back_to_the_head():
    """Marks pay only while they are quicker than the head: SLOW_HEAD_READS claims in a
    row past the marks that take longer than the last claim from the head send the
    claims back to the head (which must be slow SLOW_HEAD_READS times again to bring
    the marks back)."""
    marks = ClaimMarks(clock=Clock())
    claims = [_claim_of("default", 1)]
    _slow_head(marks, claims, seconds=0.02)
    for _ in range(SLOW_HEAD_READS - 1):
        after = marks.after(None, None)
        assert after is not None
        marks.claimed(None, None, after=after, claims=claims, seconds=0.5)
    after = marks.after(None, None)
    assert after is not None  # two slow claims past the marks may be a stall
    marks.claimed(None, None, after=after, claims=claims, seconds=0.001)  # quick: reset
    for _ in range(SLOW_HEAD_READS):
        after = marks.after(None, None)
        assert after is not None
        marks.claimed(None, None, after=after, claims=claims, seconds=0.5)
    assert marks.after(None, None) is None  # back to the head
    marks.claimed(None, None, after=None, claims=claims, seconds=0.02)
    assert marks.after(None, None) is None  # one slow head read is not three
