"""Periodic schedules are judged when they are defined, and a maintenance service that
raises never stops the others, the reaper above all."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

import pgbaton
from pgbaton.maintenance import Leader, Reaper, Scheduler


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
    scheduler = Scheduler(aqueue, app.periodics, interval=0.2, catch_up=3)
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
