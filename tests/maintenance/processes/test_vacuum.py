"""The leader's vacuum of the jobs table (maintenance/services.py, Vacuumer;
docs/explanation/scaling.md, "The claim's dead head"): Queue.vacuum runs only past its
thresholds, never waits for a table another VACUUM holds, and refuses with a clear error
a role that may not vacuum; a real worker's leader vacuums a table its own drain filled
with dead rows, and says so with an event."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgbaton
from pgbaton.errors import ConfigurationError, InvalidArgument
from pgbaton.maintenance import Leader, Vacuumer
from pgbaton.testing import WorkerThread
from tests.worker_processes import scalar, wait_until

VACUUMS = "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass"
DEAD = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass"


def hold_off_autovacuum(db: psycopg.Connection) -> None:
    """An autovacuum that comes by mid-test empties the count these tests wait for."""
    db.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")


def make_dead_rows(queue: pgbaton.Queue, db: psycopg.Connection, count: int) -> None:
    """Claim and complete `count` jobs: two dead row versions each, once the statistics
    hear of them (a backend reports at most once a second, an idle one within ten).
    Waits for half: the claims' and completions' own reads prune some of those versions
    on the page (PostgreSQL takes the pruned ones off the count)."""
    hold_off_autovacuum(db)
    queue.enqueue_many([{"task": "noop"} for _ in range(count)])
    for claim in queue.claim("w", limit=count):
        assert queue.complete(claim)
    wait_until(lambda: scalar(db, DEAD) >= count // 2, timeout=30,
               what="the statistics to count the dead rows")


def test_vacuum_runs_past_its_thresholds_only(queue: pgbaton.Queue, db):
    make_dead_rows(queue, db, 200)
    dead = scalar(db, DEAD)
    before = scalar(db, VACUUMS)
    assert queue.vacuum(min_dead=dead + 1) == 0  # fewer than asked for
    # 200 done rows live: a share of 100x the live ones is more dead than there are.
    assert queue.vacuum(min_dead=1, min_dead_share=100.0) == 0
    assert scalar(db, VACUUMS) == before
    assert queue.vacuum(min_dead=dead) == dead
    wait_until(lambda: scalar(db, VACUUMS) == before + 1, timeout=15,
               what="the VACUUM to be counted")
    wait_until(lambda: scalar(db, DEAD) == 0, timeout=15, what="no dead rows left")
    assert queue.vacuum() == 0  # nothing dead: nothing to do


@pytest.mark.parametrize("options", [
    {"min_dead": -1}, {"min_dead": 2**31}, {"min_dead": 1.5}, {"min_dead": True},
    {"min_dead_share": -0.1}, {"min_dead_share": float("nan")},
    {"min_dead_share": float("inf")}, {"min_dead_share": "0.1"},
])
def test_vacuum_refuses_bad_thresholds(queue: pgbaton.Queue, options):
    with pytest.raises(InvalidArgument, match=next(iter(options))):
        queue.vacuum(**options)


@pytest.mark.parametrize("value", [-1, 2**31, 1.5, True, "50000"])
def test_worker_config_refuses_a_bad_vacuum_threshold(value):
    with pytest.raises(InvalidArgument, match="vacuum_dead_tuples"):
        pgbaton.WorkerConfig(vacuum_dead_tuples=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="vacuum_interval"):
        pgbaton.WorkerConfig(vacuum_interval=0)


def test_vacuum_skips_a_table_another_vacuum_holds_without_waiting(
    queue: pgbaton.Queue, db, dsn: str, schema: str
):
    """SHARE UPDATE EXCLUSIVE is what a VACUUM (autovacuum's too) holds: the call comes
    back at once with 0 and leaves the table as it was."""
    make_dead_rows(queue, db, 50)
    before = scalar(db, VACUUMS)
    with psycopg.connect(dsn) as holder:
        holder.execute(f'LOCK TABLE "{schema}".jobs IN SHARE UPDATE EXCLUSIVE MODE')
        result: list[int] = []
        call = threading.Thread(target=lambda: result.append(queue.vacuum(min_dead=1)))
        call.start()
        call.join(timeout=20)
        assert not call.is_alive(), "vacuum waited for the lock"
        assert result == [0]
    assert scalar(db, VACUUMS) == before
    assert queue.vacuum(min_dead=1) > 0  # the lock gone, it runs


def test_a_role_that_may_not_vacuum_is_told_how_to_fix_it(
    queue: pgbaton.Queue, db, dsn: str, schema: str
):
    """Neither owner nor superuser: a clear ConfigurationError, and no VACUUM tried.
    From PostgreSQL 17, GRANT MAINTAIN is enough."""
    role = f"pgbaton_no_vacuum_{uuid.uuid4().hex[:8]}"
    db.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        db.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        db.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
        make_dead_rows(queue, db, 20)
        with pgbaton.Queue(make_conninfo(dsn, user=role), schema=schema) as other:
            with pytest.raises(ConfigurationError, match=r"may not VACUUM .*\.jobs") as error:
                other.vacuum(min_dead=1)
            assert "MAINTAIN" in str(error.value) and role in str(error.value)
            if db.info.server_version >= 170000:
                db.execute(f'GRANT MAINTAIN ON "{schema}".jobs TO "{role}"')
                assert other.vacuum(min_dead=1) > 0
    finally:
        db.execute(f'DROP OWNED BY "{role}"')
        db.execute(f'DROP ROLE "{role}"')


def test_the_leader_vacuums_the_table_its_drain_filled_with_dead_rows(
    dsn: str, schema: str, queue: pgbaton.Queue, db
):
    """A real worker, maintenance on, vacuum_dead_tuples=500: draining 1,500 jobs leaves
    3,000 dead rows; the leader vacuums (the server counts a manual VACUUM) and emits
    jobs.vacuumed with the dead rows it found."""
    app = pgbaton.App(dsn, schema=schema)

    @app.task
    async def noop() -> None:
        pass

    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def count(event: pgbaton.Event) -> None:
        with lock:
            counts[event.name] += event.detail["count"]

    app.subscribe(count, names=["jobs.vacuumed"])
    before = scalar(db, VACUUMS)
    try:
        with WorkerThread(app, maintenance=True, vacuum_interval=0.2,
                          vacuum_dead_tuples=500, elect_interval=0.2, poll_interval=0.2,
                          concurrency=16):
            queue.enqueue_many([{"task": "noop"} for _ in range(1500)])
            wait_until(lambda: scalar(db, VACUUMS) > before, timeout=60,
                       what="the leader's VACUUM")
            wait_until(lambda: app.events.flush() and counts["jobs.vacuumed"] > 0,
                       timeout=15, what="the jobs.vacuumed event")
            # The leader may vacuum once 500 dead rows are counted, mid-drain: wait for
            # the drain itself before stopping, as a stopping worker claims nothing.
            wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE task = 'noop'"
                                      " AND status <> 'done'") == 0,
                       timeout=60, what="every job done")
    finally:
        app.events.unsubscribe(count)
    assert counts["jobs.vacuumed"] >= 500
    assert scalar(db, "SELECT count(*) FROM jobs WHERE task = 'noop' AND status <> 'done'") == 0


def test_no_vacuum_leaves_the_table_to_autovacuum(dsn: str, schema: str, queue, db):
    """vacuum_dead_tuples=None: the leader has no vacuumer at all."""
    app = pgbaton.App(dsn, schema=schema)

    @app.task
    async def noop() -> None:
        pass

    with WorkerThread(app, maintenance=True, vacuum_dead_tuples=None,
                      elect_interval=0.2) as running:
        assert running.worker is not None
        wait_until(lambda: running.worker.leader.is_leader, timeout=30,  # type: ignore[union-attr]
                   what="leadership")
        names = [s.name for s in running.worker.leader.services]  # type: ignore[union-attr]
    assert "vacuumer" not in names and "reaper" in names


async def test_a_deposed_leader_leaves_no_vacuum_running(aqueue: pgbaton.AsyncQueue, db):
    """The leader starts its VACUUM as a task of its own; when the leader stops (here:
    cancelled, as a stopping worker does), that task is cancelled or done, never left
    running past the term."""
    hold_off_autovacuum(db)
    await aqueue.enqueue_many([{"task": "noop"} for _ in range(3000)])
    for claim in await aqueue.claim("w", limit=3000):
        assert await aqueue.complete(claim)
    # 6,000 dead versions less those pruned on the page; the vacuumer needs 5% of the
    # live rows (150).
    wait_until(lambda: scalar(db, DEAD) >= 1000, timeout=30, what="dead rows counted")
    vacuumer = Vacuumer(aqueue, interval=30.0, min_dead=1)
    leader = Leader(aqueue, [vacuumer], elect_interval=0.05, tick=0.01)
    run = asyncio.create_task(leader.run())
    try:
        for _ in range(500):
            if vacuumer._running is not None:
                break
            await asyncio.sleep(0.01)
        started = vacuumer._running
        assert started is not None, "the leader never started its VACUUM"
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
    assert vacuumer._running is None
    # Cancelled (or already finished) by the leader's end, not merely forgotten.
    assert started.done() or started.cancelling() > 0
    await asyncio.gather(started, return_exceptions=True)
