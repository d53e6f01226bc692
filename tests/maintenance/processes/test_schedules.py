"""Periodic schedules are judged when they are defined, workers agree on the schedules
table, and a maintenance service that raises never stops the others, the reaper above
all."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

import pgbaton
from pgbaton.maintenance import Leader, Reaper, Scheduler
from pgbaton.schedules import code_definitions


def test_a_cron_that_never_fires_is_refused():
    app = pgbaton.App("postgresql://nowhere/db")
    with pytest.raises(pgbaton.InvalidArgument, match="never fires"):
        app.periodic("0 0 30 2 *")  # February the 30th


def test_a_key_function_that_raises_is_refused_at_definition():
    app = pgbaton.App("postgresql://nowhere/db")

    def key(**args: object) -> str:
        raise KeyError("customer")

    with pytest.raises(pgbaton.InvalidArgument, match="cannot make a job: KeyError"):
        app.periodic("* * * * *", key=key)(lambda: None)


def test_two_identical_schedules_are_refused_and_different_args_are_not():
    app = pgbaton.App("postgresql://nowhere/db")

    @app.periodic("* * * * *", args={"region": "eu"})
    def report(region: str) -> None: ...

    app.periodic("* * * * *", args={"region": "us"})(report)
    with pytest.raises(pgbaton.InvalidArgument, match="already has the schedule"):
        app.periodic("* * * * *", args={"region": "eu"})(report)
    keys = {p.idempotency_key(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) for p in app.periodics}
    assert len(keys) == 2


async def test_two_schedules_of_one_task_both_enqueue_each_tick(aqueue, db):
    """Two schedules of one task with different args: each tick makes one job of each."""
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.periodic("* * * * * *", args={"region": "eu"})
    async def report(region: str) -> None: ...

    app.periodic("* * * * * *", args={"region": "us"})(report)
    now = dt.datetime.now(dt.UTC)
    await aqueue.sync_code_schedules(code_definitions(app.periodics, now, 3), now=now)
    scheduler = Scheduler(aqueue, app.tasks, interval=0.2, catch_up=3)
    made = await scheduler.run_once()
    rows = db.execute("SELECT args, run_at FROM jobs ORDER BY run_at, id").fetchall()
    assert made == len(rows) >= 4
    per_tick: dict[dt.datetime, set[str]] = {}
    for row in rows:
        per_tick.setdefault(row["run_at"], set()).add(row["args"]["region"])
    assert all(regions == {"eu", "us"} for regions in per_tick.values())


class Broken:
    name = "broken"
    interval = 0.05
    event = None

    def on_elected(self) -> None:
        pass

    def on_deposed(self) -> None:
        pass

    async def run_once(self) -> int:
        raise RuntimeError("a service with a bug")


async def test_a_raising_service_does_not_stop_the_reaper(aqueue, db, caplog):
    """The broken service is logged with its traceback and retried at its interval; the
    reaper beside it still hands back an expired lease."""
    job_id = await aqueue.enqueue("t")
    (claim,) = await aqueue.claim("gone-worker", lease=0.2)
    assert claim.id == job_id
    leader = Leader(aqueue, [Broken(), Reaper(aqueue, interval=0.05)], elect_interval=0.1)
    run = asyncio.create_task(leader.run())
    try:
        for _ in range(200):
            status = db.execute("SELECT status FROM jobs WHERE id = %s", (job_id,)).fetchone()
            if status["status"] == "pending":
                break
            await asyncio.sleep(0.05)
        assert status["status"] == "pending"
        assert leader.failures["broken"] >= 1 and leader.runs["reaper"] >= 1
        assert "a service with a bug" in caplog.text
        assert any(r.exc_info for r in caplog.records if "broken" in r.getMessage())
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


FLEET_OPTIONS = ("--lease", "2", "--poll-interval", "0.2")


def fleet_ticks(db, name: str) -> dict:
    return db.execute(
        "SELECT count(*) AS jobs, count(DISTINCT run_at) AS ticks,"
        " count(*) FILTER (WHERE args = '{\"seconds\": 0.01}') AS changed"
        " FROM jobs WHERE idempotency_key LIKE %s", (f"pgbaton:periodic:{name}:%",),
    ).fetchone()


def test_a_runtime_schedule_fires_once_per_tick_in_a_fleet_and_follows_changes(
    start_worker, db, queue, app_schema,
):
    """Three worker processes; the leader is killed midway so that the others compete
    for the lead. A schedule added at run time fires once per tick throughout (counted
    per tick in SQL), a change of its args holds without a restart, and once paused it
    enqueues nothing while another schedule beside it goes on."""
    from tests.maintenance.processes.test_maintenance import leaders
    from tests.worker_processes import wait_until

    workers = [start_worker(*FLEET_OPTIONS) for _ in range(3)]
    queue.add_schedule("fleet", "* * * * * *", "work", {"seconds": 0}, new=True)
    wait_until(lambda: fleet_ticks(db, "fleet")["jobs"] >= 3, timeout=20,
               what="three ticks of the run-time schedule")
    queue.update_schedule("fleet", args={"seconds": 0.01}, by="test")
    wait_until(lambda: fleet_ticks(db, "fleet")["changed"] >= 1, timeout=10,
               what="a tick with the changed args")
    (old,) = leaders(workers)
    old.kill()
    survivors = [w for w in workers if w is not old]
    before = fleet_ticks(db, "fleet")["jobs"]
    wait_until(lambda: fleet_ticks(db, "fleet")["jobs"] >= before + 3, timeout=30,
               what="three ticks under the next leader")
    queue.pause_schedule("fleet", by="test")
    paused_at = fleet_ticks(db, "fleet")["jobs"]
    queue.add_schedule("marker", "* * * * * *", "work", {"seconds": 0})
    wait_until(lambda: fleet_ticks(db, "marker")["jobs"] >= 2, timeout=20,
               what="two ticks of the marker: the leader ran after the pause")
    summary = fleet_ticks(db, "fleet")
    assert summary["jobs"] == paused_at
    assert summary["jobs"] == summary["ticks"], summary  # never two jobs of one tick
    per_tick = db.execute(
        "SELECT run_at FROM jobs WHERE idempotency_key LIKE 'pgbaton:periodic:%%'"
        " GROUP BY task, args, run_at, idempotency_key HAVING count(*) > 1").fetchall()
    assert per_tick == []
    for worker in survivors:
        assert worker.stop() == 0


async def test_a_worker_hands_schedule_events_to_the_apps_subscribers(aqueue, db):
    """A real worker, its leader's scheduler included: app.subscribe sees the code
    schedule its code no longer has reported missing by that worker, and the ticks
    its leader enqueues, with the worker's id and the jobs counted in SQL."""
    from pgbaton.worker import Worker, WorkerConfig

    old = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @old.periodic("0 * * * *", schedule="retired")
    def retired() -> None: ...

    now = dt.datetime.now(dt.UTC)
    await aqueue.sync_code_schedules(code_definitions(old.periodics, now, 3), now=now)
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.periodic("* * * * * *", schedule="every-second")
    async def tick() -> None: ...

    seen: list[pgbaton.Event] = []
    app.subscribe(seen.append, names=["schedule.missing", "schedule.enqueued"])
    worker = Worker(app, WorkerConfig(poll_interval=0.1, elect_interval=0.2,
                                      periodic_interval=0.1))
    run = asyncio.create_task(worker.run())
    deadline = asyncio.get_running_loop().time() + 30
    while not any(e.name == "schedule.enqueued" for e in seen):
        assert asyncio.get_running_loop().time() < deadline, seen
        app.events.flush()
        await asyncio.sleep(0.05)
    worker.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    app.events.flush()
    missing = [e for e in seen if e.name == "schedule.missing"]
    assert [(e.detail["schedule"], e.detail["by"]) for e in missing] == [
        ("retired", f"worker {worker.worker_id}")]
    enqueued = [e for e in seen if e.name == "schedule.enqueued"]
    assert {e.worker_id for e in enqueued} == {worker.worker_id}
    assert {e.detail["schedule"] for e in enqueued} == {"every-second"}
    jobs = db.execute("SELECT id FROM jobs WHERE idempotency_key LIKE "
                      "'pgbaton:periodic:every-second:%%'").fetchall()
    assert sum(e.count for e in enqueued) == len(jobs)
    assert {e.job_id for e in enqueued} <= {row["id"] for row in jobs}
