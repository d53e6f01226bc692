"""Schedules emit events (docs/reference/events.md): each change an operator makes, each
tick the leader enqueues, the ticks a catch-up policy leaves out, and a code schedule
gone from code, each with the schedule's name and who did it."""

from __future__ import annotations

import datetime as dt

import pytest

import pgbaton
from pgbaton.events import Events
from pgbaton.maintenance import Scheduler
from pgbaton.schedules import code_definitions

from .test_schedules import Clock, at, count


def collect(events: Events, names_prefix: str = "schedule.") -> list[pgbaton.Event]:
    seen: list[pgbaton.Event] = []
    events.subscribe(lambda e: seen.append(e) if e.name.startswith(names_prefix) else None)
    return seen


def brief(seen: list[pgbaton.Event]) -> list[tuple]:
    return [(e.name, e.detail["schedule"], e.detail["by"]) for e in seen]


def test_an_operators_changes_each_emit_one_event(queue, db):
    """add, update, pause, resume, remove: one event each, with the schedule, its task
    and who; run_now is a job.enqueued; a refused change emits nothing."""
    seen = collect(queue.events)
    queue.add_schedule("nightly", "30 2 * * *", "report", {"region": "eu"}, new=True,
                       queue="reports", by="alice")
    queue.update_schedule("nightly", cron="0 3 * * *", args={"region": "us"}, by="bob")
    with pytest.raises(pgbaton.InvalidArgument, match="never fires"):
        queue.update_schedule("nightly", cron="0 0 30 2 *", by="mallory")
    queue.pause_schedule("nightly", by="carol")
    queue.resume_schedule("nightly", by="carol")
    queue.remove_schedule("nightly", by="dave")
    assert queue.events.flush()
    assert brief(seen) == [
        ("schedule.added", "nightly", "alice"), ("schedule.updated", "nightly", "bob"),
        ("schedule.paused", "nightly", "carol"), ("schedule.resumed", "nightly", "carol"),
        ("schedule.removed", "nightly", "dave"),
    ]
    assert {(e.task, e.queue) for e in seen} == {("report", "reports")}
    assert seen[1].detail["changes"] == ["args", "cron"]


async def test_the_leader_emits_ticks_enqueued_and_ticks_skipped_by_catch_up(aqueue, db):
    """Every minute, policy `latest`; the leader ran at 11:00 and then not until
    12:00:05: the run enqueues the newest missed tick and 12:00, one schedule.enqueued
    of count 2 naming both ticks and the newest job, and one schedule.skipped naming
    the span whose ticks were left out. Counted against the jobs table."""
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)
    start = at(2026, 6, 1, 11)
    await aqueue.add_schedule("minutely", "* * * * *", "t", new=True, catch_up="latest",
                              now=start - dt.timedelta(seconds=30))
    clock = Clock(start)
    scheduler = Scheduler(aqueue, app.tasks, interval=0.2, catch_up=9, clock=clock,
                          worker_id="leader-1")
    assert await scheduler.run_once() == 1
    seen = collect(aqueue.events)
    clock.now = start + dt.timedelta(hours=1, seconds=5)
    assert await scheduler.run_once() == 2
    assert aqueue.events.flush()
    enqueued, skipped = seen
    newest = db.execute("SELECT max(id) AS id FROM jobs").fetchone()["id"]
    assert (enqueued.name, enqueued.worker_id, enqueued.count, enqueued.job_id) == (
        "schedule.enqueued", "leader-1", 2, newest)
    assert enqueued.detail["ticks"] == ["2026-06-01T11:59:00+00:00",
                                        "2026-06-01T12:00:00+00:00"]
    assert (skipped.name, skipped.worker_id, skipped.count) == (
        "schedule.skipped", "leader-1", 1)
    assert skipped.detail | {"by": None} == {
        "schedule": "minutely", "by": None, "catch_up": "latest", "catch_up_limit": 100,
        "missed_after": "2026-06-01T11:00:00+00:00",
        "missed_before": "2026-06-01T11:59:56+00:00",
    }
    assert count(db) == 3
    # A run with nothing due emits nothing.
    clock.now += dt.timedelta(seconds=1)
    assert await scheduler.run_once() == 0
    assert aqueue.events.flush() and len(seen) == 2


async def test_a_code_schedule_gone_from_code_is_reported_then_removed(aqueue, db):
    """A starting worker's code lacks it: schedule.missing, by that worker; the leader
    deletes it past the grace: schedule.removed, by the leader."""
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.periodic("0 * * * *", schedule="gone")
    def gone() -> None: ...

    now = at(2026, 6, 1, 12)
    await aqueue.sync_code_schedules(code_definitions(app.periodics, now, 9), now=now,
                                     by="worker w1")
    seen = collect(aqueue.events)
    await aqueue.sync_code_schedules(code_definitions([], now, 9), now=now, by="worker w2")
    await aqueue.sync_code_schedules(code_definitions([], now, 9), now=now, by="worker w3")
    clock = Clock(now + dt.timedelta(days=7, minutes=1))
    await Scheduler(aqueue, app.tasks, interval=0.2, clock=clock).run_once()
    assert aqueue.events.flush()
    assert brief(seen) == [
        ("schedule.missing", "gone", "worker w2"),  # once: w3 found it missing already
        ("schedule.removed", "gone", "the leader: missing from code past the grace"),
    ]
    assert seen[0].task == seen[1].task == app.periodics[0].task.name
