"""The history retention mode (docs/explanation/retention.md): done jobs move from jobs
to the partitioned jobs_history exactly, only the eligible ones, without a loss or a
double under concurrent movers, and leave it a whole partition at a time."""

from __future__ import annotations

import datetime as dt
import math
import multiprocessing
import multiprocessing.synchronize
import time
import traceback
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton import Batch, Callback
from tests.helpers import run_at_once

SPAWN = multiprocessing.get_context("spawn")
PROCESS_TIMEOUT_SECONDS = 90.0
DAY = 86400.0

# Values a careless copy would change: markup, quotes, SQL, escapes, every JSON kind.
HOSTILE: dict[str, Any] = {
    "markup": "<script>alert('x')</script>&amp;<b>bold</b> \"quoted\" `tick` ${x}",
    "sql": "'); DROP TABLE jobs; -- %s %(id)s $1",
    "unicode": "naïve café 日本語 🙂 \u202e right-to-left \t tab \n newline \\ backslash",
    "nested": {"a": [1, 2.5, -0.5, 0.125, None, True, False, {"b": [], "": "empty key"}]},
    "big": 12345678901234567890123456789,
    "empty": "",
}


def columns(db: psycopg.Connection[DictRow], table: str) -> list[tuple[str, str, bool]]:
    rows = db.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull"
        " FROM pg_attribute AS a WHERE a.attrelid = %s::regclass AND a.attnum > 0"
        " AND NOT a.attisdropped ORDER BY a.attnum",
        (table,),
    )
    return [(r["attname"], r["type"], r["attnotnull"]) for r in rows]


def finish(queue: pgbaton.Queue, task: str, result: Any = None) -> int:
    [claim] = queue.claim("w", tasks=[task])
    assert queue.complete(claim, result=result)
    return claim.id


def backdate(db: psycopg.Connection[DictRow], seconds: float, *ids: int) -> None:
    """Make the jobs look as if they finished (and were created) `seconds` ago."""
    db.execute(
        "UPDATE jobs SET finished_at = now() - make_interval(secs => %s),"
        " created_at = now() - make_interval(secs => %s + 1) WHERE id = ANY(%s)",
        (seconds, seconds, list(ids)),
    )


def where(db: psycopg.Connection[DictRow]) -> dict[int, str]:
    """Each job id and the table that holds it (an id in both would show twice: see
    the count in every test that uses this)."""
    rows = db.execute(
        "SELECT id, 'jobs' AS t FROM jobs UNION ALL SELECT id, 'history' FROM jobs_history"
    ).fetchall()
    found = {r["id"]: r["t"] for r in rows}
    assert len(found) == len(rows), "a job is in both tables"
    return found


def test_jobs_history_has_the_columns_of_jobs_in_their_order(queue, db):
    """jobs_history has exactly jobs' columns, names, types and NOT NULLs, in jobs'
    order: the move is INSERT ... SELECT *, so a migration that adds a column to jobs and
    forgets jobs_history fails here, not in production."""
    jobs = columns(db, "jobs")
    assert len(jobs) == 34 and jobs[0][0] == "id" and jobs[-1][0] == "holds"
    assert columns(db, "jobs_history") == jobs
    kind = db.execute(
        "SELECT c.relkind::text AS kind, pg_get_partkeydef(c.oid) AS key FROM pg_class c"
        " WHERE c.oid = 'jobs_history'::regclass"
    ).fetchone()
    assert kind == {"kind": "p", "key": "RANGE (finished_at)"}
    # No constraint (checks, keys) costs the move's inserts, and no partition exists yet.
    # (PostgreSQL 18 lists NOT NULLs as constraints too: those are the columns' own.)
    assert db.execute(
        "SELECT count(*) AS n FROM pg_constraint WHERE conrelid = 'jobs_history'::regclass"
        " AND contype <> 'n'"
    ).fetchone()["n"] == 0
    assert queue.history_partitions() == []


def test_a_moved_job_is_identical_column_by_column(queue, db):
    """Every column of a moved job is what it was in jobs, hostile JSON and markup-like
    strings included, and Queue.get returns the same Job from jobs_history."""
    ids = [
        queue.enqueue("hostile", HOSTILE, key="<k>'\"", priority=-7, max_attempts=3,
                      limit_key="<tenant>&"),
        *queue.enqueue_many([{"task": "member", "args": {"n": n}} for n in range(2)],
                            batch=Batch(on_finish=Callback("finished"))),
    ]
    db.execute("UPDATE jobs SET meta = %s WHERE id = %s",
               ('{"traceparent": "00-<b>-01", "x": "\\"\'"}', ids[0]))
    [claim] = queue.claim("w<1>", tasks=["hostile"])
    assert queue.fail(claim, RuntimeError(HOSTILE["markup"] + HOSTILE["unicode"]), retry_in=0)
    finish(queue, "hostile", result=HOSTILE)
    finish(queue, "member")
    finish(queue, "member")
    finish(queue, "finished", result=[HOSTILE, "x"])
    db.execute("CREATE TABLE copied AS SELECT * FROM jobs")
    jobs_before = {job_id: queue.get(job_id) for job_id in ids}
    count = db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
    assert count == 4

    assert queue.archive(after=0, partition=DAY) == 4
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    # The whole row as text, column by column in order, each as PostgreSQL prints it.
    differing = db.execute(
        "SELECT count(*) AS n FROM copied AS b FULL JOIN jobs_history AS h ON h.id = b.id"
        " WHERE b.id IS NULL OR h.id IS NULL OR b::text IS DISTINCT FROM h::text"
    ).fetchone()["n"]
    assert differing == 0
    assert db.execute("SELECT * FROM copied ORDER BY id").fetchall() == db.execute(
        "SELECT * FROM jobs_history ORDER BY id").fetchall()
    assert {job_id: queue.get(job_id) for job_id in ids} == jobs_before
    assert jobs_before[ids[0]].args == HOSTILE  # type: ignore[union-attr]


def test_only_done_jobs_without_an_idempotency_key_past_history_after_move(queue, db):
    """A done job finished more than `after` ago moves; a done job with an explicit
    idempotency key, a recent done job, failed, cancelled and unfinished jobs stay, and
    the keyed, failed and cancelled ones are pruned after the retention as before."""
    old_done = queue.enqueue("t", {"n": 1})
    recent_done = queue.enqueue("t", {"n": 2})
    keyed_done = queue.enqueue_once("t", {"n": 3}, idempotency_key="order-3").id
    failed = queue.enqueue("t", {"n": 4}, max_attempts=1)
    cancelled = queue.enqueue("t", {"n": 5})
    pending = queue.enqueue("t", {"n": 7}, delay=3600)
    claims = {c.id: c for c in queue.claim("w", limit=5)}
    assert set(claims) == {old_done, recent_done, keyed_done, failed, cancelled}
    for job_id in (old_done, recent_done, keyed_done):
        assert queue.complete(claims[job_id])
    assert queue.fail(claims[failed], "boom")
    assert queue.cancel(cancelled)
    running = queue.enqueue("t", {"n": 8})
    [held] = queue.claim("w")
    assert held.id == running
    backdate(db, 2 * DAY, old_done, keyed_done, failed, cancelled)
    # The default key the worker hands out (pgbaton-job-<id>) is not stored: only an
    # explicit one is, and only that one keeps a job in jobs.
    keys = {r["id"]: r["idempotency_key"]
            for r in db.execute("SELECT id, idempotency_key FROM jobs")}
    assert keys[old_done] is None and keys[keyed_done] == "order-3"

    assert queue.archive(after=3600, partition=DAY) == 1
    assert queue.archive(after=3600, partition=DAY) == 0
    assert where(db) == {
        old_done: "history", recent_done: "jobs", keyed_done: "jobs", failed: "jobs",
        cancelled: "jobs", pending: "jobs", running: "jobs",
    }
    # enqueue_once's window is what it was: the keyed job is still found by its key.
    again = queue.enqueue_once("t", {"n": 3}, idempotency_key="order-3")
    assert (again.id, again.created) == (keyed_done, False)
    # after=0 takes the recent done job too; still not the keyed one.
    assert queue.archive(after=0, partition=DAY) == 1
    # What stays is pruned after the retention, as in delete mode; unfinished jobs stay.
    assert queue.prune(retention=DAY) == 3
    assert where(db) == {
        old_done: "history", recent_done: "history", pending: "jobs", running: "jobs",
    }


def test_get_jobs_stats_and_the_dashboard_list_read_the_history(queue, db, dsn, schema):
    """A moved job is found by Queue.get, listed by Queue.jobs (not when the filter
    wants failed jobs), counted as done by Queue.stats, and listed on the dashboard."""
    moved = queue.enqueue("t", {"n": 1}, queue="mail")
    kept = queue.enqueue("t", {"n": 2}, queue="mail")
    failed = queue.enqueue("t", {"n": 3}, queue="mail", max_attempts=1)
    finish(queue, "t")
    claims = queue.claim("w", limit=2)
    assert queue.complete(claims[0]) and queue.fail(claims[1], "boom")
    backdate(db, 2 * 3600, moved)
    assert queue.archive(after=3600, partition=DAY) == 1

    found = queue.get(moved)
    assert found is not None and (found.id, found.status, found.args) == (moved, "done", {"n": 1})
    assert queue.get(moved + 1000) is None
    assert [j.id for j in queue.jobs()] == [failed, kept, moved]
    assert [j.id for j in queue.jobs(status="done")] == [kept, moved]
    assert [j.id for j in queue.jobs(status="failed")] == [failed]
    assert [j.id for j in queue.jobs(status="done", limit=1)] == [kept]
    [stats] = queue.stats()
    assert (stats.queue, stats.done, stats.failed, stats.pending) == ("mail", 2, 1, 0)
    # A queue whose only jobs were moved is still counted.
    db.execute("UPDATE jobs_history SET queue = 'archived_only'")
    assert {s.queue: s.done for s in queue.stats()} == {"archived_only": 1, "mail": 1}

    # The operator's delete reaches a moved job too.
    other = queue.enqueue("t", {"n": 4}, queue="mail")
    finish(queue, "t")
    backdate(db, 2 * 3600, other)
    assert queue.archive(after=3600, partition=DAY) == 1
    assert queue.delete(other) and queue.get(other) is None
    assert not queue.delete(other)

    pytest.importorskip("starlette")
    import asyncio

    from pgbaton.job_filter import JobFilter
    from pgbaton.web.store import Store

    async def page(**filters: Any) -> list[int]:
        store = Store(dsn, schema)
        try:
            rows = await store.job_page(JobFilter(**filters), None, 10)
            return [row["id"] for row in rows]
        finally:
            await store.close()

    assert asyncio.run(page()) == [failed, kept, moved]
    assert asyncio.run(page(status="done")) == [kept, moved]
    assert asyncio.run(page(status="failed")) == [failed]
    assert asyncio.run(page(text="nothing like this")) == []


def test_a_moved_parent_and_batch_member_end_exactly_as_pruned_ones(queue, db):
    """Leaving jobs by the move fires jobs_ended_by_delete as the pruner's DELETE does:
    the done parent's edges go, its batch's counts and callbacks stay as they were. A
    job enqueued after a moved parent counts it as done (a pruned one no longer
    exists); one retried after its moved parent is not held back by it."""
    def scenario(tag: str) -> dict[str, int]:
        parent = queue.enqueue(f"parent_{tag}")
        child = queue.enqueue(f"child_{tag}", after=[parent], max_attempts=1)
        batch = queue.enqueue_many([{"task": f"member_{tag}"}] * 2,
                                   batch=Batch(on_finish=Callback(f"finished_{tag}")))
        finish(queue, f"parent_{tag}")
        [claim] = queue.claim("w", tasks=[f"child_{tag}"])
        assert queue.fail(claim, "boom")
        finish(queue, f"member_{tag}")
        finish(queue, f"member_{tag}")
        return {"parent": parent, "child": child, "a": batch[0], "b": batch[1]}

    pruned, moved = scenario("pruned"), scenario("moved")
    backdate(db, 3 * DAY, *pruned.values())
    backdate(db, 2 * 3600, *moved.values())
    assert queue.prune(retention=DAY) == 4
    assert queue.archive(after=3600, partition=DAY) == 3  # the failed child stays

    def state(ids: dict[str, int]) -> dict[str, Any]:
        edges = db.execute(
            "SELECT count(*) AS n FROM job_dependencies WHERE parent_id = %s OR child_id = %s",
            (ids["parent"], ids["child"]),
        ).fetchone()["n"]
        batch = db.execute(
            "SELECT b.jobs, b.jobs_left, b.done, b.failed, b.cancelled,"
            " b.finished_at IS NOT NULL AS finished FROM batches AS b"
            " WHERE b.id = (SELECT batch_id FROM before_ids WHERE id = %s)", (ids["a"],)
        ).fetchone()
        return {"edges": edges, "batch": batch}

    db.execute("CREATE TEMP TABLE before_ids AS SELECT id, batch_id FROM jobs_history"
               " UNION ALL SELECT id, batch_id FROM jobs")
    # The pruned group's batch id: its members are gone, so read it from the callback.
    db.execute(
        "INSERT INTO before_ids SELECT %s, (args->'batch'->>'id')::bigint FROM jobs"
        " WHERE task = 'finished_pruned'", (pruned["a"],)
    )
    assert state(moved) == state(pruned) == {
        "edges": 0,
        "batch": {"jobs": 2, "jobs_left": 0, "done": 2, "failed": 0, "cancelled": 0,
                  "finished": True},
    }
    assert db.execute(
        "SELECT count(*) AS n FROM jobs WHERE task LIKE 'finished_%'").fetchone()["n"] == 2
    # The retried child of the moved parent runs: no parent left to wait for.
    assert queue.retry(moved["child"])
    assert queue.get(moved["child"]).status == "pending"  # type: ignore[union-attr]
    # A new job after the moved parent counts it as done; after the pruned one, refused.
    late = queue.enqueue("late", after=[moved["parent"]])
    assert queue.get(late).status == "pending"  # type: ignore[union-attr]
    with pytest.raises(pgbaton.InvalidArgument):
        queue.enqueue("later", after=[pruned["parent"]])


def test_drop_takes_only_partitions_wholly_past_the_retention(queue, db):
    """Partitions are named after their start (UTC), created for the bins of the jobs
    moved, and a partition goes only once its whole range ended more than the retention
    ago: one that still holds a job finished within it stays."""
    now = db.execute("SELECT now() AS now").fetchone()["now"].astimezone(dt.UTC)
    base = now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=5)
    ids = [queue.enqueue("t", {"n": n}) for n in range(3)]
    for claim in queue.claim("w", limit=3):
        assert queue.complete(claim)
    for n, job_id in enumerate(ids):
        db.execute("UPDATE jobs SET finished_at = %s WHERE id = %s",
                   (base + dt.timedelta(minutes=60 * n + 10), job_id))
    assert queue.archive(after=0, partition=3600) == 3
    partitions = queue.history_partitions()
    assert [p.name for p in partitions] == [
        "jobs_history_" + (base + dt.timedelta(hours=n)).strftime("%Y%m%d_%H%M")
        for n in range(3)
    ]
    assert [(p.from_at, p.to_at) for p in partitions] == [
        (base + dt.timedelta(hours=n), base + dt.timedelta(hours=n + 1)) for n in range(3)
    ]
    # The first partition ended an hour before the second: a retention half an hour
    # shorter than the first's age drops the first only, then nothing more.
    retention = (now - (base + dt.timedelta(hours=1))).total_seconds() - 1800
    assert queue.drop_history(retention=retention) == 1
    assert queue.drop_history(retention=retention) == 0
    assert [p.name for p in queue.history_partitions()] == [p.name for p in partitions[1:]]
    assert queue.get(ids[0]) is None
    assert queue.get(ids[1]) is not None
    # A day-wide partition is named by its date.
    day_job = queue.enqueue("t")
    finish(queue, "t")
    db.execute("UPDATE jobs SET finished_at = '2026-01-15 13:45+00' WHERE id = %s", (day_job,))
    assert queue.archive(after=0, partition=DAY) == 1
    assert "jobs_history_20260115" in [p.name for p in queue.history_partitions()]
    assert queue.drop_history(retention=0) == 3
    assert queue.history_partitions() == []


def test_a_drop_behind_a_reader_gives_up_quickly_and_succeeds_later(queue, db, dsn, schema):
    """A reader holding jobs_history makes the drop's lock time out after
    history_lock_wait: the call returns at once with nothing dropped (no error), and the
    next call, once the reader is gone, drops the partition."""
    job_id = queue.enqueue("t")
    finish(queue, "t")
    backdate(db, 3 * DAY, job_id)
    assert queue.archive(after=0, partition=DAY) == 1
    queue.history_lock_wait = 0.2
    with psycopg.connect(dsn) as reader:  # a transaction, open until rollback
        reader.execute(f'SELECT count(*) FROM "{schema}".jobs_history')  # type: ignore[arg-type]
        started = time.monotonic()
        assert queue.drop_history(retention=DAY) == 0
        assert time.monotonic() - started < 5
        # Readers behind the refused drop were never held up for long either.
        assert queue.get(job_id) is not None
        reader.rollback()
    assert queue.drop_history(retention=DAY) == 1
    assert queue.history_partitions() == [] and queue.get(job_id) is None


async def test_the_async_queue_archives_and_drops(aqueue, db):
    """AsyncQueue.archive and drop_history: the same statements as the sync twin."""
    ids = await aqueue.enqueue_many([{"task": "t", "args": {"n": n}} for n in range(5)])
    for claim in await aqueue.claim("w", limit=5):
        assert await aqueue.complete(claim)
    backdate(db, 3 * DAY, *ids)
    assert await aqueue.archive(after=0, partition=DAY, limit=2) == 2
    assert await aqueue.archive(after=0, partition=DAY) == 3
    assert (await aqueue.get(ids[0])).status == "done"  # type: ignore[union-attr]
    assert len(await aqueue.history_partitions()) == 1
    assert await aqueue.drop_history(retention=DAY) == 1
    assert await aqueue.get(ids[0]) is None


@pytest.mark.parametrize("call", [
    lambda q: q.archive(after=math.nan, partition=DAY),
    lambda q: q.archive(after=-1, partition=DAY),
    lambda q: q.archive(after=0, partition=30),
    lambda q: q.archive(after=0, partition=90),
    lambda q: q.archive(after=0, partition=32 * DAY),
    lambda q: q.archive(after=0, partition=math.inf),
    lambda q: q.archive(after=0, partition=DAY, limit=0),
    lambda q: q.drop_history(retention=math.nan),
    lambda q: q.drop_history(retention=-5),
], ids=["after-nan", "after-negative", "partition-30s", "partition-90s",
        "partition-32-days", "partition-inf", "limit-0", "retention-nan",
        "retention-negative"])
def test_bad_input_is_refused_before_anything_is_written(queue, db, call):
    """Durations, widths and limits are checked as prune's are: one InvalidArgument."""
    job_id = queue.enqueue("t")
    finish(queue, "t")
    with pytest.raises(pgbaton.InvalidArgument):
        call(queue)
    assert where(db) == {job_id: "jobs"}


@pytest.mark.parametrize("options", [
    {"retention_mode": "archive"}, {"retention_mode": None}, {"history_after": -1.0},
    {"history_after": math.nan}, {"history_partition": 61.0},
    {"history_partition": 0}, {"history_partition": "86400"},
])
def test_worker_config_checks_the_retention_fields(options):
    """A retention mode other than delete or history, or a bad duration or width, is
    InvalidArgument naming the field."""
    with pytest.raises(pgbaton.InvalidArgument, match=next(iter(options))):
        pgbaton.WorkerConfig(**options)
    config = pgbaton.WorkerConfig(retention_mode="history", history_after=0,
                                  history_partition=3600)
    assert config.as_dict()["retention_mode"] == "history"


def _mover(
    index: int, dsn: str, schema: str, start: multiprocessing.synchronize.Barrier,
    reports: multiprocessing.Queue[dict[str, Any]],
) -> None:
    """One spawned process: wait for the other, then archive small batches until none
    is left."""
    try:
        moved = batches = 0
        with pgbaton.Queue(dsn, schema=schema) as queue:
            queue.open()
            start.wait(timeout=PROCESS_TIMEOUT_SECONDS)
            while batch := queue.archive(after=0, partition=60, limit=25):
                moved += batch
                batches += 1
        reports.put({"process": index, "moved": moved, "batches": batches})
    except BaseException:
        start.abort()
        reports.put({"process": index, "error": traceback.format_exc()})


@pytest.mark.slow
def test_two_movers_in_two_processes_share_fresh_partitions_without_failing(
    queue, db, dsn, schema
):
    """Two processes moving at the same instant over 40 minute-bins that have no
    partition yet (each batch needs new ones): neither fails on a partition the other
    created, every job is moved once, and each bin has exactly one partition."""
    total = 2000
    ids = queue.enqueue_many([{"task": "t", "args": {"n": n}} for n in range(total)])
    db.execute(
        "UPDATE jobs SET status = 'done', attempts = 1, started_at = now(),"
        " finished_at = date_trunc('minute', now()) - interval '2 hours'"
        "               + (id % 40) * interval '1 minute' + interval '5 seconds'"
    )
    ran = run_at_once(_mover, 2, dsn, schema)
    results = ran.reports
    assert not ran.errors, "\n".join(ran.errors)
    assert sum(r["moved"] for r in results) == total
    assert all(r["batches"] > 0 for r in results), results  # both really moved
    assert db.execute(
        "SELECT count(*) AS n, count(DISTINCT id) AS ids, bool_and(status = 'done') AS done"
        " FROM jobs_history"
    ).fetchone() == {"n": total, "ids": total, "done": True}
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    assert sorted(r["id"] for r in db.execute("SELECT id FROM jobs_history")) == ids
    partitions = queue.history_partitions()
    assert len(partitions) == 40
    assert all(p.to_at - p.from_at == dt.timedelta(minutes=1) for p in partitions)
