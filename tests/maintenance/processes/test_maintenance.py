"""Maintenance in a worker fleet: one leader, periodic ticks once each, reaper, pruner."""

from __future__ import annotations

import datetime as dt
import itertools

import pgbaton
from pgbaton.app import Periodic
from pgbaton.maintenance import Scheduler
from pgbaton.schedules import code_definitions
from tests import app_under_test as tasks
from tests.worker_processes import WorkerProcess, scalar, wait_until

LEADER_LINE = "now the maintenance leader"
# Short leases so that a tick job held by a killed worker is reaped within the test.
FLEET_OPTIONS = ("--lease", "2", "--poll-interval", "0.2")


def leader_locks(db, schema: str) -> int:
    """Sessions holding the schema's leader advisory lock (a bigint key split in two)."""
    return scalar(
        db,
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND ((classid::bigint << 32) | objid::bigint) = hashtext('pgbaton.leader.' || %s)",
        schema,
    )


def leaders(workers: list[WorkerProcess]) -> list[WorkerProcess]:
    return [w for w in workers if LEADER_LINE in w.log()]


def tick_summary(db) -> dict:
    """Over the periodic's jobs: how many, how many distinct ticks and keys, and the
    span in whole seconds from the first tick to the last."""
    return db.execute(
        "SELECT count(*) AS jobs, count(DISTINCT run_at) AS ticks,"
        " count(DISTINCT idempotency_key) AS keys,"
        " extract(epoch FROM max(run_at) - min(run_at))::int + 1 AS span,"
        " bool_and(run_at = date_trunc('second', run_at)) AS on_whole_seconds,"
        " bool_and(idempotency_key LIKE 'pgbaton:periodic:every_second:%') AS keyed"
        " FROM jobs WHERE task = 'every_second'"
    ).fetchone()


def done_ticks(db) -> int:
    return scalar(db, "SELECT count(*) FROM jobs WHERE task = 'every_second' AND status = 'done'")


def test_three_workers_enqueue_each_tick_once(start_worker, db, app_schema):
    """With three workers one is leader and each cron tick becomes exactly one job, with
    no tick missing between the first and the last."""
    workers = [start_worker(*FLEET_OPTIONS) for _ in range(3)]
    wait_until(lambda: done_ticks(db) >= 5, timeout=20, what="five ticks to be done")
    # Five ticks take four seconds or more, two election rounds for the other workers.
    assert len(leaders(workers)) == 1, [w.log() for w in workers]
    assert leader_locks(db, app_schema) == 1
    summary = tick_summary(db)
    assert summary["on_whole_seconds"] and summary["keyed"], summary
    assert summary["jobs"] == summary["ticks"] == summary["keys"] == summary["span"], summary
    # Each tick job's one effect: no tick ran twice.
    assert scalar(
        db,
        "SELECT count(*) FROM (SELECT job_id FROM effects WHERE what = 'tick'"
        " GROUP BY job_id HAVING count(*) > 1) AS twice",
    ) == 0
    for worker in workers:
        assert worker.stop() == 0
    assert leader_locks(db, app_schema) == 0


def test_killed_leader_is_replaced_and_ticks_go_on_without_duplicates(
    start_worker, db, app_schema
):
    """SIGKILL on the leader: another worker takes the lock, ticks continue, and no tick
    is enqueued twice."""
    workers = [start_worker(*FLEET_OPTIONS) for _ in range(3)]
    wait_until(lambda: done_ticks(db) >= 2, timeout=20, what="two ticks to be done")
    [old] = leaders(workers)
    survivors = [w for w in workers if w is not old]
    old.kill()
    killed_at = scalar(db, "SELECT now()")
    wait_until(lambda: len(leaders(survivors)) == 1, timeout=15, what="a new leader")
    assert len(leaders(survivors)) == 1
    wait_until(
        lambda: scalar(
            db,
            "SELECT count(*) FROM jobs WHERE task = 'every_second' AND status = 'done'"
            " AND run_at > %s",
            killed_at,
        ) >= 3,
        timeout=20, what="three ticks after the kill to be done",
    )
    assert leader_locks(db, app_schema) == 1
    summary = tick_summary(db)
    assert summary["jobs"] == summary["ticks"] == summary["keys"], summary
    # A new leader enqueues the ticks that fell due while nobody led (its catch-up
    # window covers the handover), so the sequence has no gap.
    breaks = scalar(
        db,
        "SELECT count(*) FROM (SELECT run_at - lag(run_at) OVER (ORDER BY run_at) AS step"
        " FROM jobs WHERE task = 'every_second') AS steps WHERE step > interval '1 second'",
    )
    assert breaks == 0, tick_summary(db)
    for worker in survivors:
        assert worker.stop() == 0


def test_reaper_returns_an_expired_lease_and_the_job_runs(
    start_worker, db, app_schema, queue: pgbaton.Queue
):
    """The one worker's maintenance reaps a job whose holder's lease expired; the job runs
    again and the stale holder's completion changes nothing."""
    job = tasks.work.enqueue({"seconds": 0})
    [stale] = queue.claim("stalled-holder", lease=30)
    assert stale.id == job
    db.execute("UPDATE jobs SET lease_until = now() - interval '1 second' WHERE id = %s", (job,))
    worker = start_worker("--poll-interval", "0.2")
    wait_until(
        lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", job) == "done",
        timeout=15, what="the reaped job to be done",
    )
    row = db.execute("SELECT attempts, errors, result FROM jobs WHERE id = %s", (job,)).fetchone()
    assert row["attempts"] == 2
    assert row["result"] == "ok"
    [error] = row["errors"]
    assert (error["type"], error["attempt"], error["worker_id"]) == (
        "LeaseExpired", 1, "stalled-holder",
    )
    effects = db.execute(
        "SELECT attempt, worker_pid, what FROM effects WHERE job_id = %s ORDER BY id", (job,)
    ).fetchall()
    assert [tuple(e.values()) for e in effects] == [
        (2, worker.pid, "start"), (2, worker.pid, "end"),
    ]
    assert "reaped 1 jobs" in worker.log()
    assert queue.complete(stale, "stale") is False
    assert scalar(db, "SELECT result FROM jobs WHERE id = %s", job) == "ok"
    assert worker.stop() == 0


def test_prune_deletes_only_finished_jobs_past_retention(queue: pgbaton.Queue, db):
    """Queue.prune deletes done, failed and cancelled jobs finished before the retention,
    and keeps recent finished jobs and every unfinished job, however old."""
    old_done, new_done, old_failed, old_cancelled, old_pending, old_running = (
        queue.enqueue("t", {"n": n}, max_attempts=1) for n in range(6)
    )
    claims = {c.id: c for c in queue.claim("w", limit=6)}
    assert queue.complete(claims[old_done]) and queue.complete(claims[new_done])
    assert queue.fail(claims[old_failed], "boom")
    assert queue.cancel(old_cancelled)
    assert queue.release(claims[old_pending])
    db.execute(
        "UPDATE jobs SET created_at = now() - interval '3 days',"
        " finished_at = CASE WHEN finished_at IS NOT NULL THEN now() - interval '2 days' END"
        " WHERE id <> %s",
        (new_done,),
    )
    assert queue.prune(retention=24 * 3600) == 3
    remaining = db.execute("SELECT id, status FROM jobs ORDER BY id").fetchall()
    assert [(r["id"], r["status"]) for r in remaining] == [
        (new_done, "done"), (old_pending, "pending"), (old_running, "running"),
    ]
    assert queue.prune(retention=24 * 3600) == 0
    # Retention zero: the recent done job goes too, unfinished ones never do.
    assert queue.prune(retention=0) == 1
    assert scalar(db, "SELECT count(*) FROM jobs") == 2


async def test_two_leaders_enqueue_one_tick_once(aqueue: pgbaton.AsyncQueue, db):
    """Two leaders that both find the same ticks due (a handover: the new one catches up
    on the last seconds) make one job of each tick: the second finds the row advanced,
    and had it read the row before, the tick's idempotency key would refuse it."""
    every_second = Periodic(tasks.work, "* * * * * *")
    now = dt.datetime.now(dt.UTC)
    await aqueue.sync_code_schedules(code_definitions([every_second], now, 5), now=now)
    old_leader, new_leader = (
        Scheduler(aqueue, {"work": tasks.work}, interval=0.2, catch_up=5) for _ in range(2)
    )
    stale = await aqueue.schedules_due(dt.datetime.now(dt.UTC))
    first = await old_leader.run_once()
    second = await new_leader.run_once()
    assert first >= 4 and second <= 1  # the first saw the last five seconds' ticks
    (row,) = stale
    late = await aqueue.fire_schedules([(row, [], now, now)])
    assert late == [None]  # fenced: the row moved on since it was read
    rows = db.execute("SELECT run_at, idempotency_key FROM jobs ORDER BY run_at").fetchall()
    ticks = [row["run_at"].astimezone(dt.UTC) for row in rows]
    assert len(rows) == first + second
    # One job per tick (the keys are unique by the index; the ticks are what can repeat).
    assert len(set(ticks)) == len(rows)
    assert all(b - a == dt.timedelta(seconds=1) for a, b in itertools.pairwise(ticks))
    assert [r["idempotency_key"] for r in rows] == [every_second.idempotency_key(t)
                                                    for t in ticks]
