"""Schedules stored in the database: the API refuses bad input before writing anything,
code and database agree, and the leader's scheduler, driven by an injected clock,
enqueues each tick once, across daylight saving transitions and after an outage."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import pgbaton
from pgbaton.maintenance import Scheduler
from pgbaton.schedules import code_definitions

UTC = dt.UTC


def at(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=UTC)


def count(db, sql: str = "SELECT count(*) AS n FROM jobs", params: Any = None) -> int:
    return int(db.execute(sql, params).fetchone()["n"])


def schedule_rows(db) -> list[dict[str, Any]]:
    return db.execute("SELECT * FROM schedules ORDER BY name").fetchall()


@pytest.fixture
def app(queue):
    app = pgbaton.App(queue.dsn, schema=queue.schema)

    @app.task(queue="reports")
    def report(region: str, days: int = 1) -> None: ...

    yield app
    app.queue.close()


def test_add_list_pause_resume_remove(app, db):
    added = app.schedules.add("nightly", "30 2 * * *", "report", {"region": "eu"},
                              timezone="Europe/Berlin", catch_up="latest", by="alice")
    assert added.origin == "database" and added.state == "active"
    assert added.next_tick > added.created_at and added.updated_by == "alice"
    assert [s.name for s in app.schedules.list()] == ["nightly"]
    assert app.schedules.pause("nightly", by="bob").state == "paused"
    resumed = app.schedules.resume("nightly", by="bob")
    assert resumed.state == "active" and resumed.revision == 3
    changed = app.schedules.update("nightly", cron="0 3 * * *", by="carol")
    assert changed.cron == "0 3 * * *" and changed.revision == 4
    assert changed.next_fires(at(2027, 3, 27), 2)[0].strftime("%H:%M %Z") == "03:00 CET"
    app.schedules.remove("nightly", by="dave")
    assert schedule_rows(db) == []


def test_run_now_enqueues_with_the_tasks_options_and_records_the_job(app, db):
    app.schedules.add("nightly", "30 2 * * *", "report", {"region": "eu"})
    job_id = app.schedules.run_now("nightly", by="alice")
    job = db.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert (job["task"], job["queue"], job["args"]) == ("report", "reports", {"region": "eu"})
    assert schedule_rows(db)[0]["last_job_id"] == job_id


@pytest.mark.parametrize(("call", "message"), [
    (lambda s: s.add("x", "0 0 30 2 *", "report", {"region": "eu"}), "never fires"),
    (lambda s: s.add("x", "* * * * *", "report", {"region": "eu"}, timezone="Nowhere/Zone"),
     "unknown time zone 'Nowhere/Zone'"),
    (lambda s: s.add("x", "* * * * *", "reprot", {"region": "eu"}), "unknown task 'reprot'"),
    (lambda s: s.add("x", "* * * * *", "report", {"regoin": "eu"}),
     "missing 'region'; unexpected 'regoin'"),
    (lambda s: s.add("x", "* * * * *", "report", {"region": "eu"}, catch_up="some"),
     "catch_up must be one of skip, latest, all"),
    (lambda s: s.add("x", "* * * * *", "report", {"region": "eu"}, catch_up="all",
                     catch_up_limit=0), "catch_up_limit must be"),
    (lambda s: s.add("", "* * * * *", "report", {"region": "eu"}), "name must be"),
    (lambda s: s.update("nowhere", cron="* * * * *"), "no schedule named 'nowhere'"),
    (lambda s: s.update("taken", colour="red"), "no 'colour' to change"),
    (lambda s: s.update("taken", args={"days": 2}), "missing 'region'"),
    (lambda s: s.add("taken", "* * * * *", "report", {"region": "us"}), "exists already"),
    (lambda s: s.add("a\x00b", "* * * * *", "report", {"region": "eu"}), "NUL character"),
    (lambda s: s.add("x", "* * * * *", "report", {"region": "eu"}, max_attempts=2**40),
     "max_attempts must be"),
    (lambda s: s.add("x", "* * * * *", "report", {"region": "eu"}, priority=2**31),
     "priority must be"),
    # Typed args judge it first where pydantic is installed.
    (lambda s: s.add("x", "* * * * *", "report", {"region": object()}),
     "JSON|valid string"),
    (lambda s: s.add("x", "* * * * *", "report", {"region": "eu"}, paused="yes"),
     "paused must be True or False"),
    (lambda s: s.add("x", "* * * * *", "report", {"region": "eu"}, colour="red"),
     "add\\(\\) takes no 'colour'"),
])
def test_bad_input_is_one_clear_error_and_writes_nothing(app, db, call, message):
    app.schedules.add("taken", "* * * * *", "report", {"region": "eu"})
    before = schedule_rows(db)
    with pytest.raises(pgbaton.InvalidArgument, match=message):
        call(app.schedules)
    assert schedule_rows(db) == before
    assert count(db) == 0


def test_without_an_app_a_task_must_be_named_already_or_new(queue, db):
    with pytest.raises(pgbaton.InvalidArgument, match=r"unknown task 'later'.*new=True"):
        queue.add_schedule("a", "* * * * *", "later")
    assert schedule_rows(db) == []
    queue.add_schedule("a", "* * * * *", "later", new=True)
    queue.add_schedule("b", "*/5 * * * *", "later")  # a schedule names it now
    assert [r["name"] for r in schedule_rows(db)] == ["a", "b"]


def test_a_code_schedule_can_be_paused_but_not_edited_or_removed(app, queue, db):
    @app.periodic("0 * * * *", args={"days": 2}, schedule="hourly")
    def prune(days: int) -> None: ...

    now = at(2026, 6, 1, 12, 30)
    taken, missing = queue.sync_code_schedules(code_definitions(app.periodics, now, 9),
                                               now=now)
    assert (taken, missing) == ([], [])
    with pytest.raises(pgbaton.InvalidArgument, match=r"defined in code.*change it there"):
        app.schedules.update("hourly", cron="5 * * * *")
    with pytest.raises(pgbaton.InvalidArgument, match=r"defined in code.*remove it there"):
        app.schedules.remove("hourly")
    app.schedules.pause("hourly")
    # A restart writes the definition again, and leaves the pause alone.
    queue.sync_code_schedules(code_definitions(app.periodics, now, 9), now=now)
    (row,) = schedule_rows(db)
    assert row["paused"] and row["origin"] == "code" and row["revision"] == 2


def test_a_schedule_gone_from_code_is_marked_then_deleted_after_the_grace(app, queue, db):
    @app.periodic("0 * * * *", schedule="old")
    def old() -> None: ...

    now = at(2026, 6, 1, 12)
    queue.sync_code_schedules(code_definitions(app.periodics, now, 9), now=now)
    app.schedules.add("runtime", "0 * * * *", "old")
    _, missing = queue.sync_code_schedules(code_definitions([], now, 9), now=now)
    assert missing == ["old"]  # the run-time one is not the code's to judge
    assert app.schedules.get("old").state == "missing from code"
    assert queue.schedules_due(now + dt.timedelta(hours=2)) == [
        s for s in queue.schedules_due(now + dt.timedelta(hours=2)) if s.name == "runtime"]
    assert queue.delete_missing_schedules(before=now - dt.timedelta(seconds=1)) == []
    assert queue.delete_missing_schedules(before=now + dt.timedelta(days=7)) == ["old"]


def test_a_code_schedule_does_not_replace_a_runtime_one_of_its_name(app, queue, db):
    app.schedules.add("hourly", "0 * * * *", "report", {"region": "eu"})

    @app.periodic("5 * * * *", schedule="hourly")
    def other() -> None: ...

    now = at(2026, 6, 1, 12)
    taken, _ = queue.sync_code_schedules(code_definitions(app.periodics, now, 9), now=now)
    assert taken == ["hourly"]
    assert schedule_rows(db)[0]["cron"] == "0 * * * *"


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


async def run_leader(aqueue, app, clock: Clock, until: dt.datetime, *,
                     step: dt.timedelta, window: float = 9) -> int:
    """A leader's scheduler run at every `step` of the injected clock up to `until`."""
    scheduler = Scheduler(aqueue, app.tasks, interval=0.2, catch_up=window, clock=clock)
    made = 0
    while clock.now <= until:
        made += await scheduler.run_once()
        clock.now += step
    return made


@pytest.mark.parametrize(("day", "utc_hour", "utc_minute"), [
    ((2027, 3, 28), 1, 0),     # spring forward: 02:30 does not exist, runs at 03:00 CEST
    ((2027, 10, 31), 0, 30),   # fall back: 02:30 happens twice, runs at the first, CEST
])
async def test_a_daily_berlin_schedule_runs_once_on_a_transition_day(
    aqueue, db, day, utc_hour, utc_minute,
):
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.task
    def nightly() -> None: ...

    start = dt.datetime(*day, tzinfo=UTC) - dt.timedelta(hours=2)
    await aqueue.add_schedule("nightly", "30 2 * * *", "nightly", timezone="Europe/Berlin",
                              new=True, now=start)
    clock = Clock(start)
    await run_leader(aqueue, app, clock, start + dt.timedelta(hours=8),
                     step=dt.timedelta(minutes=5))
    rows = db.execute("SELECT run_at FROM jobs").fetchall()
    assert [r["run_at"] for r in rows] == [dt.datetime(*day, utc_hour, utc_minute, tzinfo=UTC)]


@pytest.mark.parametrize(("policy", "jobs"), [("skip", 0), ("latest", 1), ("all", 20)])
async def test_catch_up_after_every_worker_was_down_an_hour(aqueue, db, policy, jobs):
    """Every minute; the leader ran at 11:00, then nothing until 12:00:05; the next run
    enqueues what the policy says, counted in SQL, plus the tick of 12:00 (on time)."""
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)
    start = at(2026, 6, 1, 11)
    await aqueue.add_schedule("minutely", "* * * * *", "t", new=True, catch_up=policy,
                              catch_up_limit=20, now=start - dt.timedelta(seconds=30))
    clock = Clock(start)
    await run_leader(aqueue, app, clock, start, step=dt.timedelta(seconds=1))
    assert count(db) == 1
    db.execute("DELETE FROM jobs")
    clock.now = start + dt.timedelta(hours=1, seconds=5)
    await run_leader(aqueue, app, clock, clock.now, step=dt.timedelta(seconds=1))
    assert count(db) == jobs + 1
    assert count(db, "SELECT count(DISTINCT idempotency_key) AS n FROM jobs") == jobs + 1
    (row,) = schedule_rows(db)
    assert row["last_tick"] == start + dt.timedelta(hours=1)
    assert row["next_tick"] == start + dt.timedelta(hours=1, minutes=1)


async def test_two_leaders_enqueue_each_tick_once_and_a_change_holds_at_the_next_run(
    aqueue, db,
):
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)
    start = at(2026, 6, 1, 12)
    await aqueue.add_schedule("often", "* * * * * *", "t", new=True, now=start)
    clock = Clock(start)
    one = Scheduler(aqueue, app.tasks, interval=0.2, clock=clock)
    two = Scheduler(aqueue, app.tasks, interval=0.2, clock=clock)
    for _ in range(10):
        clock.now += dt.timedelta(seconds=1)
        await one.run_once()
        await two.run_once()
    assert count(db) == 10
    assert count(db, "SELECT count(DISTINCT run_at) AS n FROM jobs") == 10
    await aqueue.update_schedule("often", args={"changed": True}, now=clock.now)
    clock.now += dt.timedelta(seconds=1)
    await two.run_once()
    newest = db.execute("SELECT args FROM jobs ORDER BY run_at DESC LIMIT 1").fetchone()
    assert newest["args"] == {"changed": True}
    await aqueue.pause_schedule("often")
    clock.now += dt.timedelta(seconds=5)
    assert await one.run_once() == 0 and count(db) == 11


async def test_code_schedules_keep_the_key_of_the_in_memory_schedules(aqueue, db):
    """A rolling deploy: the tick a previous release's leader enqueued is not enqueued
    again by a leader that reads the row."""
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.periodic("* * * * *", args={"region": "eu"})
    def report(region: str) -> None: ...

    (periodic,) = app.periodics
    tick = at(2026, 6, 1, 12, 1)
    assert periodic.idempotency_key(tick) == (
        f"pgbaton:periodic:report:{periodic.schedule_id}:2026-06-01T12:01:00+00:00")
    await aqueue.enqueue("report", {"region": "eu"}, run_at=tick,
                         idempotency_key=periodic.idempotency_key(tick))
    now = at(2026, 6, 1, 12, 0, 30)
    await aqueue.sync_code_schedules(code_definitions(app.periodics, now, 9), now=now)
    clock = Clock(now)
    await run_leader(aqueue, app, clock, at(2026, 6, 1, 12, 2), step=dt.timedelta(seconds=10))
    assert count(db) == 2  # 12:01 once, 12:02


async def test_the_leader_deletes_a_code_schedule_missing_past_the_grace(aqueue, db, caplog):
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.periodic("0 * * * *", schedule="gone")
    def gone() -> None: ...

    now = at(2026, 6, 1, 12)
    await aqueue.sync_code_schedules(code_definitions(app.periodics, now, 9), now=now)
    await aqueue.sync_code_schedules(code_definitions([], now, 9), now=now)
    clock = Clock(now + dt.timedelta(days=6))
    scheduler = Scheduler(aqueue, app.tasks, interval=0.2, clock=clock)
    assert await scheduler.run_once() == 0  # missing: it enqueues nothing, and stays
    assert [r["name"] for r in schedule_rows(db)] == ["gone"]
    clock.now = now + dt.timedelta(days=7, minutes=1)
    await scheduler.run_once()
    assert schedule_rows(db) == [] and count(db) == 0
    assert "deleted schedule 'gone'" in caplog.text


async def test_a_schedule_that_cannot_make_its_job_does_not_stop_the_others(aqueue, db,
                                                                             caplog):
    """A row written elsewhere with a zone this host does not know: one warning, however
    many runs, and left out of the due read (so that such rows never fill its limit);
    the schedule beside it still fires; once an operator fixes the row it fires again."""
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)
    now = at(2026, 6, 1, 12)
    await aqueue.add_schedule("good", "* * * * * *", "t", new=True, now=now)
    await aqueue.add_schedule("bad", "* * * * * *", "t", new=True, now=now)
    db.execute("UPDATE schedules SET timezone = 'Nowhere/Zone' WHERE name = 'bad'")
    clock = Clock(now + dt.timedelta(seconds=2))
    scheduler = Scheduler(aqueue, app.tasks, interval=0.2, clock=clock)
    assert await scheduler.run_once() == 2
    for _ in range(5):  # past the minute a failing row waits: still no second warning
        clock.now += dt.timedelta(seconds=61)
        assert await scheduler.run_once() >= 1
    warnings = [r.getMessage() for r in caplog.records if "'bad'" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "unknown time zone 'Nowhere/Zone'" in warnings[0]
    assert "pgbaton schedule update bad --timezone ZONE" in warnings[0]
    assert await aqueue.schedules_due(clock.now, passed=["bad"]) == [
        s for s in await aqueue.schedules_due(clock.now) if s.name == "good"]
    assert count(db, "SELECT count(*) AS n FROM jobs WHERE idempotency_key LIKE "
                     "'pgbaton:periodic:bad:%%'") == 0
    # Fixed by an operator (a new revision): planned again at the next run.
    await aqueue.update_schedule("bad", timezone="UTC", now=clock.now)
    clock.now += dt.timedelta(seconds=1)
    assert await scheduler.run_once() == 2
    assert count(db, "SELECT count(*) AS n FROM jobs WHERE idempotency_key LIKE "
                     "'pgbaton:periodic:bad:%%'") == 1


def test_app_periodic_checks_its_zone_policy_and_name_when_defined():
    app = pgbaton.App("postgresql://nowhere/db")
    with pytest.raises(pgbaton.InvalidArgument, match="unknown time zone 'Mars/Base'"):
        app.periodic("* * * * *", timezone="Mars/Base")
    with pytest.raises(pgbaton.InvalidArgument, match="catch_up must be one of"):
        app.periodic("* * * * *", catch_up="every")
    def first() -> None: ...

    def second() -> None: ...

    app.periodic("* * * * *", schedule="one")(first)
    with pytest.raises(pgbaton.InvalidArgument, match="a schedule named 'one' already"):
        app.periodic("*/5 * * * *", schedule="one")(second)


def test_a_code_schedules_options_reach_its_row(app, queue, db):
    @app.periodic("30 2 * * *", timezone="Europe/Berlin", catch_up="all",
                  catch_up_limit=7, args={"region": "eu"})
    def berlin(region: str) -> None: ...

    now = at(2027, 3, 27, 12)
    queue.sync_code_schedules(code_definitions(app.periodics, now, 9), now=now)
    (row,) = schedule_rows(db)
    assert row["name"] == app.periodics[0].name and row["name"].startswith("berlin:")
    assert (row["timezone"], row["catch_up"], row["catch_up_limit"], row["queue"]) == (
        "Europe/Berlin", "all", 7, "default")
    assert row["next_tick"] == at(2027, 3, 28, 1, 0) and row["last_tick"] is None


async def test_a_schedule_whose_jobs_are_refused_waits_alone(aqueue, db, caplog):
    """All due schedules are written in one transaction; when one's job is refused (its
    key held by another task's job, under the previous release's global index), each
    is written on its own, and only that one waits."""
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)
    now = at(2026, 6, 1, 12)
    for name in ("a", "b", "c"):
        await aqueue.add_schedule(name, "* * * * * *", "t", new=True, now=now)
    tick = now + dt.timedelta(seconds=1)
    await aqueue.enqueue("other", idempotency_key=f"pgbaton:periodic:b:{tick.isoformat()}")
    scheduler = Scheduler(aqueue, app.tasks, interval=0.2, clock=Clock(tick))
    assert await scheduler.run_once() == 2
    assert "schedule 'b' (task 't') failed" in caplog.text
    assert [r["next_tick"] == tick + dt.timedelta(seconds=1) for r in schedule_rows(db)] == [
        True, False, True]
