"""Unique jobs in enqueue_many (docs/howto/unique.md): honoured job by job, a key
repeated in the batch included, all or nothing, and never by COPY."""

from __future__ import annotations

import psycopg
import pytest

import pgbaton
from pgbaton import Unique


def _count(db: psycopg.Connection) -> int:
    return int(db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"])  # type: ignore[index]


def test_a_batch_honours_unique_job_by_job(queue, db):
    """Unique jobs in a batch meet the table's jobs and each other (the later of a
    repeated key gets the first's id); the others are written as ever; ids in order."""
    unique = Unique(args=["n"])
    existing = queue.enqueue("t", {"n": 0}, unique=unique)
    ids = queue.enqueue_many([
        {"task": "t", "args": {"n": 0}, "unique": unique},
        {"task": "plain", "args": {"n": 0}},
        {"task": "t", "args": {"n": 1}, "unique": unique},
        {"task": "t", "args": {"n": 1, "x": 2}, "unique": unique},
        {"task": "plain", "args": {"n": 0}, "unique": None},
        {"task": "t", "args": {"n": 2}, "unique": unique, "priority": 3},
    ])
    assert ids[0] == existing and ids[3] == ids[2]
    assert len(set(ids)) == 5
    rows = db.execute("SELECT id, task, args, priority FROM jobs ORDER BY id").fetchall()
    assert [(r["task"], r["args"]) for r in rows] == [
        ("t", {"n": 0}), ("plain", {"n": 0}), ("plain", {"n": 0}), ("t", {"n": 1}),
        ("t", {"n": 2})]
    assert rows[-1]["priority"] == 3


def test_a_large_unique_batch_is_written_by_insert_not_copy(queue, db, monkeypatch):
    """A batch past copy_min_jobs with unique jobs goes by INSERT ... ON CONFLICT (COPY
    cannot skip a conflict), and its repeated keys make one job each."""
    copied: list[object] = []
    monkeypatch.setattr(queue, "_copy_many", lambda *a, **k: copied.append(a))
    unique = Unique(args=["n"])
    jobs = [{"task": "t", "args": {"n": i % 50}, "unique": unique}
            for i in range(queue.copy_min_jobs + 10)]
    ids = queue.enqueue_many(jobs)
    assert copied == [] and len(set(ids)) == 50 and _count(db) == 50
    assert ids[:50] == ids[50:100]


def test_replace_and_debounce_in_a_batch(queue, db):
    """A repeated key in one batch replaces (or debounces) its first job, as a later
    call would."""
    replace = Unique(args=["n"], conflict="replace")
    ids = queue.enqueue_many([
        {"task": "t", "args": {"n": 1, "v": "a"}, "unique": replace},
        {"task": "t", "args": {"n": 1, "v": "b"}, "unique": replace, "priority": 9},
    ])
    assert ids[0] == ids[1]
    assert db.execute("SELECT args, priority FROM jobs").fetchall() == [
        {"args": {"n": 1, "v": "b"}, "priority": 9}]


def test_a_bad_unique_job_writes_none_of_the_batch(queue, db):
    """A unique job with after=, an idempotency key, a debounce with a delay, or a
    unique that is not a Unique: InvalidArgument naming the job; nothing is written."""
    parent = queue.enqueue("p")
    debounce = Unique(conflict="debounce", delay=5)
    for bad in (
        {"task": "t", "unique": Unique(), "after": [parent]},
        {"task": "t", "unique": Unique(), "idempotency_key": "k"},
        {"task": "t", "unique": debounce, "delay": 3},
        {"task": "t", "unique": "yes"},
    ):
        with pytest.raises(pgbaton.InvalidArgument, match="job 1"):
            queue.enqueue_many([{"task": "t", "unique": Unique()}, bad])
    assert _count(db) == 1


def test_a_unique_batch_in_a_rolled_back_transaction_leaves_nothing(queue, dsn, db):
    """All or nothing in the caller's transaction: rolled back, no job, no key held."""
    unique = Unique(args=[])
    with psycopg.connect(dsn) as conn:
        queue.enqueue_many([{"task": "t", "unique": unique}, {"task": "u"}], conn=conn)
        conn.rollback()
    assert _count(db) == 0
    assert queue.enqueue("t", unique=unique) > 0


def test_the_apps_enqueue_many_applies_the_tasks_unique(dsn, schema, db, queue):
    """App.enqueue_many gives each job its task's unique=, unless the job gives its own."""
    app = pgbaton.App(dsn, schema=schema)

    @app.task(unique=Unique(args=["customer_id"]))
    def sync_customer(customer_id: int, reason: str = "") -> None: ...

    ids = app.enqueue_many([
        {"task": "sync_customer", "args": {"customer_id": 1, "reason": "a"}},
        {"task": "sync_customer", "args": {"customer_id": 1, "reason": "b"}},
        {"task": "sync_customer", "args": {"customer_id": 1}, "unique": None},
    ])
    assert ids[0] == ids[1] != ids[2] and _count(db) == 2
    app.queue.close()
