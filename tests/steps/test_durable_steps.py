"""Durable steps, durable sleep and events (docs/howto/durable-steps.md), run by a real
worker beside the test and checked in SQL."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton.limits import MAX_EVENT_PAYLOAD_BYTES, MAX_STEP_RESULT_BYTES
from pgbaton.testing import WorkerThread, wait_for_job

DEADLINE = 30.0


@pytest.fixture
def app(queue: pgbaton.Queue, dsn: str, schema: str) -> pgbaton.App:
    return pgbaton.App(dsn, schema=schema)


def until(condition: Any, what: str, timeout: float = DEADLINE) -> Any:
    """Poll `condition` until it returns something true, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def job_row(db: psycopg.Connection[DictRow], job_id: int) -> DictRow:
    row = db.execute("SELECT * FROM jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return row


def steps_of(db: psycopg.Connection[DictRow], job_id: int) -> list[tuple[Any, ...]]:
    rows = db.execute("SELECT seq, name, kind, finished_at IS NOT NULL AS done "
                      "FROM job_steps WHERE job_id = %s ORDER BY seq", [job_id]).fetchall()
    return [(r["seq"], r["name"], r["kind"], r["done"]) for r in rows]


def test_a_step_runs_once_and_its_stored_result_is_replayed_on_retry(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """A retry after a failure replays the steps that finished: their functions are not
    called again, and the handler gets the same (JSON) values back."""
    calls: Counter[str] = Counter()
    keys: dict[str, str] = {}

    def charge(order_id: int) -> dict[str, Any]:
        calls["charge"] += 1
        return {"order": order_id, "at": (1, 2)}  # a tuple comes back a list

    async def ship(order_id: int) -> str:
        calls["ship"] += 1
        if calls["ship"] == 1:
            raise RuntimeError("the carrier is down")
        return f"shipped {order_id}"

    @app.task(pass_context=True, retry=lambda attempt: 0)
    async def order(ctx: pgbaton.JobContext, order_id: int) -> Any:
        charged = await ctx.step("charge", charge, order_id)
        keys["charge"] = ctx.step_key
        shipped = await ctx.step("ship", ship, order_id)
        keys["ship"] = ctx.step_key
        return [charged, shipped]

    job_id = order.defer(order_id=7)
    with WorkerThread(app, poll_interval=0.05):
        job = wait_for_job(app, job_id, timeout=DEADLINE)
    assert job.status == "done" and job.attempts == 2
    assert job.result == [{"order": 7, "at": [1, 2]}, "shipped 7"]
    assert calls == {"charge": 1, "ship": 2}
    assert steps_of(db, job_id) == [(0, "charge", "step", True), (1, "ship", "step", True)]
    assert keys == {"charge": f"pgbaton-job-{job_id}:step:charge",
                    "ship": f"pgbaton-job-{job_id}:step:ship"}
    sizes = db.execute("SELECT size FROM job_steps WHERE job_id = %s ORDER BY seq",
                       [job_id]).fetchall()
    assert [r["size"] for r in sizes] == [len('{"order": 7, "at": [1, 2]}'), len('"shipped 7"')]


def test_a_sync_handler_steps_and_sleeps_with_the_sync_methods(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """step_sync runs its function in the handler's thread; sleep_sync suspends too."""
    calls: Counter[str] = Counter()

    def fetch() -> int:
        calls["fetch"] += 1
        return 41

    @app.task(pass_context=True)
    def sync_job(ctx: pgbaton.JobContext) -> int:
        value = ctx.step_sync("fetch", fetch)
        ctx.sleep_sync(0.2)
        return int(ctx.step_sync("add", lambda: value + 1))

    job_id = sync_job.defer()
    with WorkerThread(app, poll_interval=0.05):
        job = wait_for_job(app, job_id, timeout=DEADLINE)
    assert (job.status, job.result, job.attempts, calls["fetch"]) == ("done", 42, 1, 1)
    assert steps_of(db, job_id) == [
        (0, "fetch", "step", True), (1, "sleep", "sleep", True), (2, "add", "step", True)]


def test_a_durable_sleep_frees_the_worker_and_resumes_after_its_time(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """While the job sleeps it is pending, unclaimed, its attempt given back; it wakes
    after its time and goes on from the step after the sleep."""
    calls: Counter[str] = Counter()
    events: list[pgbaton.Event] = []
    app.subscribe(events.append, names=["job.step_done", "job.sleeping", "job.woken"])

    @app.task(pass_context=True)
    async def nap(ctx: pgbaton.JobContext) -> float:
        before = await ctx.step("before", lambda: calls.update(["before"]) or time.time())
        await ctx.sleep(1.0)
        calls["after"] += 1
        return time.time() - float(before)

    job_id = nap.defer()
    with WorkerThread(app, poll_interval=0.05):
        row = until(lambda: (r := job_row(db, job_id))["status"] == "pending"
                    and r["waiting_event"] is None and r["claim_token"] is None
                    and steps_of(db, job_id)[-1:] == [(1, "sleep", "sleep", False)] and r,
                    "the job sleeps")
        assert row["attempts"] == 0 and row["worker_id"] is None
        # Due when the sleep ends, a second after it began (read from the rows, not the
        # clock now: on a busy machine that second may be over by the time it is read).
        sleep = db.execute("SELECT started_at, until FROM job_steps WHERE job_id = %s"
                           " AND kind = 'sleep'", (job_id,)).fetchone()
        assert sleep is not None and row["run_at"] == sleep["until"]
        slept = (sleep["until"] - sleep["started_at"]).total_seconds()
        assert 0.9 <= slept <= 1.1, slept
        job = wait_for_job(app, job_id, timeout=DEADLINE)
    app.events.flush(timeout=5)
    assert job.status == "done" and job.attempts == 1 and job.result >= 1.0
    assert calls == {"before": 1, "after": 1}
    assert [e.name for e in events] == ["job.step_done", "job.sleeping", "job.woken"]
    assert events[1].detail is not None and events[1].detail["kind"] == "sleep"


def test_an_event_reaches_its_waiting_job_and_one_sent_early_is_kept(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """wait_for suspends the job until send_event; an event sent before the job waits
    is kept for it; from SQL too; by key to every unfinished job of the key."""

    @app.task(pass_context=True)
    async def signup(ctx: pgbaton.JobContext, user: str) -> Any:
        await ctx.step("mail", lambda: f"mail to {user}")
        return await ctx.wait_for("confirmed", timeout=60)

    waiting = signup.defer(user="ann")
    early = signup.defer(user="bob")
    from_sql = signup.defer(user="cy")
    by_key = signup.using(key="user-dee").defer(user="dee")
    assert app.send_event(early, "confirmed", {"by": "bob"}) is False  # kept for it
    with WorkerThread(app, poll_interval=0.05):
        assert wait_for_job(app, early, timeout=DEADLINE).result == {"by": "bob"}
        for job_id in (waiting, from_sql, by_key):
            until(lambda j=job_id: job_row(db, j)["waiting_event"] == "confirmed",
                  f"job {job_id} waits")
        row = job_row(db, waiting)
        assert row["status"] == "pending" and row["attempts"] == 0
        assert row["run_at"] > dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
        assert app.send_event(waiting, "confirmed", [1, "two"]) is True
        db.execute(f'SELECT "{app.schema}".send_event(%s, %s, %s)',
                   [from_sql, "confirmed", '"yes"'])
        assert app.send_event_by_key("user-dee", "confirmed", None) == [by_key]
        results = {j: wait_for_job(app, j, timeout=DEADLINE)
                   for j in (waiting, from_sql, by_key)}
    assert results[waiting].result == [1, "two"] and results[waiting].attempts == 1
    assert results[from_sql].result == "yes"
    assert results[by_key].status == "done" and results[by_key].result is None
    assert db.execute("SELECT count(*) AS n FROM job_events").fetchone() == {"n": 0}
    assert steps_of(db, waiting) == [(0, "mail", "step", True),
                                     (1, "confirmed", "event", True)]


def test_a_wait_that_times_out_raises_timeout_error_in_the_handler(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """No event before the timeout: TimeoutError in the handler, stored, so a later
    run of the job sees the same."""

    @app.task(pass_context=True)
    async def impatient(ctx: pgbaton.JobContext) -> str:
        try:
            await ctx.wait_for("never", timeout=0.3)
        except TimeoutError as error:
            return f"gave up: {error}"
        return "got it"

    job_id = impatient.defer()
    with WorkerThread(app, poll_interval=0.05):
        job = wait_for_job(app, job_id, timeout=DEADLINE)
    assert job.status == "done" and job.result.startswith("gave up: job")
    result = db.execute("SELECT result FROM job_steps WHERE job_id = %s",
                        [job_id]).fetchone()
    assert result == {"result": {"timed_out": True}}


def test_code_that_changed_between_runs_fails_naming_both_steps(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """A step at a place where another was stored, and a stored step no longer
    reached, each fail the attempt with StepMismatch; nothing is replayed wrongly."""

    @app.task(pass_context=True, max_attempts=1)
    async def renamed(ctx: pgbaton.JobContext) -> Any:
        return await ctx.step("new_name", lambda: "fresh")

    @app.task(pass_context=True, max_attempts=1)
    async def shortened(ctx: pgbaton.JobContext) -> Any:
        return await ctx.step("first", lambda: "fresh")

    first, second = renamed.defer(), shortened.defer()
    db.execute("UPDATE jobs SET has_steps = true WHERE id IN (%s, %s)", [first, second])
    db.execute("INSERT INTO job_steps (job_id, seq, name, kind, result, finished_at) VALUES "
               "(%s, 0, 'old_name', 'step', '\"stale\"', now()), "
               "(%s, 0, 'first', 'step', '\"kept\"', now()), "
               "(%s, 1, 'second', 'step', '\"gone\"', now())", [first, second, second])
    with WorkerThread(app, poll_interval=0.05):
        one = wait_for_job(app, first, timeout=DEADLINE)
        two = wait_for_job(app, second, timeout=DEADLINE)
    assert one.status == "failed" and one.errors[-1]["type"] == "StepMismatch"
    assert "'new_name'" in one.errors[-1]["message"]
    assert "'old_name'" in one.errors[-1]["message"]
    assert two.status == "failed" and "step 'second'" in two.errors[-1]["message"]


def test_bad_steps_fail_the_attempt_with_an_error_that_names_them(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """A result JSON cannot hold, a step name used twice, a negative sleep, a sleep
    past the year 9999 and step_sync given an async function: each fails its attempt,
    naming what is wrong."""

    @app.task(pass_context=True, max_attempts=1)
    async def bad(ctx: pgbaton.JobContext, how: str) -> Any:
        if how == "result":
            return await ctx.step("unstorable", object)
        if how == "twice":
            await ctx.step("same", lambda: 1)
            return await ctx.step("same", lambda: 2)
        if how == "negative":
            return await ctx.sleep(-1)
        return await ctx.sleep(until=dt.datetime.max.replace(tzinfo=dt.UTC))

    async def coroutine_function() -> int:
        return 0

    @app.task(pass_context=True, max_attempts=1)
    def sync_bad(ctx: pgbaton.JobContext) -> Any:
        return ctx.step_sync("async", coroutine_function)

    hows = {how: bad.defer(how=how) for how in ("result", "twice", "negative", "far")}
    hows["awaitable"] = sync_bad.defer()
    with WorkerThread(app, poll_interval=0.05):
        jobs = {how: wait_for_job(app, j, timeout=DEADLINE) for how, j in hows.items()}
    messages = {how: job.errors[-1]["message"] for how, job in jobs.items()}
    assert all(job.status == "failed" for job in jobs.values())
    assert "step 'unstorable'" in messages["result"]
    assert "'same' is used twice" in messages["twice"]
    assert ">= 0" in messages["negative"]
    assert "9999" in messages["far"]
    assert "step 'async' returned an awaitable" in messages["awaitable"]
    assert steps_of(db, hows["result"]) == []
    assert steps_of(db, hows["twice"]) == [(0, "same", "step", True)]


BAD_SLEEPS: dict[str, tuple[Any, str]] = {
    # how: (what the handler does, what the error says)
    "infinite": (lambda ctx: ctx.sleep(float("inf")), "seconds must be a >= 0 number"),
    "nan": (lambda ctx: ctx.sleep(float("nan")), "seconds must be a >= 0 number"),
    "negative": (lambda ctx: ctx.sleep(-0.001), "seconds must be a >= 0 number"),
    "seconds_past_9999": (lambda ctx: ctx.sleep(1e12), "is past the year 9999"),
    "naive_until": (lambda ctx: ctx.sleep(until=dt.datetime(2030, 1, 1)),
                    "until must be a timezone-aware datetime"),
    "both": (lambda ctx: ctx.sleep(1, until=dt.datetime.now(dt.UTC)), "one of them"),
    "timeout_negative": (lambda ctx: ctx.wait_for("e", timeout=-1), "timeout must be"),
    "timeout_infinite": (lambda ctx: ctx.wait_for("e", timeout=float("inf")),
                         "timeout must be"),
    "timeout_past_9999": (lambda ctx: ctx.wait_for("e", timeout=1e12), "year 9999"),
    "result_too_big": (lambda ctx: ctx.step("big", lambda: "x" * MAX_STEP_RESULT_BYTES),
                       "the result of step 'big' of job"),
    "result_nan": (lambda ctx: ctx.step("ratio", lambda: float("nan")),
                   "the result of step 'ratio' of job"),
}


def test_bad_sleeps_waits_and_results_fail_the_attempt_and_store_nothing(
    app: pgbaton.App, db: psycopg.Connection[DictRow]
) -> None:
    """The rest of the bad input: a sleep that is not finite, is negative or ends past
    the year 9999, a naive or doubled wake time, a wait's bad timeout, a step result
    over MAX_STEP_RESULT_BYTES or not JSON: each fails its attempt (async and sync
    handlers alike) with an error that names it, and nothing is stored or suspended."""

    @app.task(pass_context=True, max_attempts=1)
    async def bad(ctx: pgbaton.JobContext, how: str) -> Any:
        return await BAD_SLEEPS[how][0](ctx)

    @app.task(pass_context=True, max_attempts=1)
    def sync_bad(ctx: pgbaton.JobContext, how: str) -> Any:
        if how == "sleep":
            return ctx.sleep_sync(float("-inf"))
        if how == "wait":
            return ctx.wait_for_sync("e", timeout=float("nan"))
        return ctx.step_sync("big", lambda: ["x" * MAX_STEP_RESULT_BYTES])

    jobs = {how: bad.defer(how=how) for how in BAD_SLEEPS}
    says = {how: said for how, (_, said) in BAD_SLEEPS.items()}
    for how, said in (("sleep", ">= 0 number"), ("wait", "timeout must be"),
                      ("result", "the result of step 'big' of job")):
        jobs[f"sync_{how}"] = sync_bad.defer(how=how)
        says[f"sync_{how}"] = said
    with WorkerThread(app, poll_interval=0.05):
        ended = {how: wait_for_job(app, j, timeout=DEADLINE) for how, j in jobs.items()}
    for how, job in ended.items():
        assert job.status == "failed", how
        assert says[how] in job.errors[-1]["message"], (how, job.errors[-1])
    assert "over pgbaton's limit" in ended["result_too_big"].errors[-1]["message"]
    assert db.execute("SELECT count(*) AS n FROM job_steps").fetchone() == {"n": 0}
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE attempts <> 1 "
                      "OR waiting_event IS NOT NULL").fetchone() == {"n": 0}


def test_bad_events_are_refused_and_write_nothing(
    app: pgbaton.App, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]
) -> None:
    """An unknown job, a finished job, an unknown key, an empty name, a payload over
    the limit or one JSON cannot hold: refused, nothing stored."""
    job_id = queue.enqueue("anything")
    with pytest.raises(pgbaton.JobNotFound, match="no job 999999"):
        app.send_event(999999, "e")
    with pytest.raises(pgbaton.JobNotFound, match="no unfinished job has key 'nobody'"):
        app.send_event_by_key("nobody", "e")
    with pytest.raises(pgbaton.InvalidArgument, match="event name"):
        app.send_event(job_id, "")
    with pytest.raises(pgbaton.InvalidArgument, match="over pgbaton's limit of 1,048,576"):
        app.send_event(job_id, "e", "x" * MAX_EVENT_PAYLOAD_BYTES)
    with pytest.raises(pgbaton.NotSerializable, match="payload of event 'e'"):
        app.send_event(job_id, "e", {1, 2})
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="limit of 1,048,576"):
        db.execute(f'SELECT "{app.schema}".send_event(%s, %s, %s)',
                   [job_id, "e", '"' + "x" * MAX_EVENT_PAYLOAD_BYTES + '"'])
    with pytest.raises(pgbaton.InvalidArgument, match="over pgbaton's limit of 1,048,576"):
        app.send_event_by_key("nobody", "e", "x" * MAX_EVENT_PAYLOAD_BYTES)
    with pytest.raises(psycopg.errors.NoDataFound, match="there is no job 999999"):
        db.execute(f'SELECT "{app.schema}".send_event(%s, %s, %s)', [999999, "e", "1"])
    with pytest.raises(psycopg.errors.NoDataFound, match="no unfinished job has key"):
        db.execute(f'SELECT "{app.schema}".send_event_by_key(%s, %s, %s)',
                   ["nobody", "e", "1"])
    # Exactly at the limit is kept (the payload's JSON text: the string and its quotes).
    assert app.send_event(job_id, "e", "x" * (MAX_EVENT_PAYLOAD_BYTES - 2)) is False
    db.execute("DELETE FROM job_events")
    db.execute("UPDATE jobs SET status = 'cancelled', finished_at = now() WHERE id = %s",
               [job_id])
    with pytest.raises(pgbaton.InvalidArgument, match="is cancelled and waits for no event"):
        app.send_event(job_id, "e")
    assert db.execute("SELECT count(*) AS n FROM job_events").fetchone() == {"n": 0}


def test_a_deleted_job_takes_its_steps_and_events_with_it(
    app: pgbaton.App, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]
) -> None:
    """Deleting (or pruning) a job removes its steps and its unread events."""

    @app.task(pass_context=True)
    async def waits(ctx: pgbaton.JobContext) -> Any:
        await ctx.step("one", lambda: 1)
        return await ctx.wait_for("go")

    job_id, other = waits.defer(), queue.enqueue("other")
    with WorkerThread(app, poll_interval=0.05):
        until(lambda: job_row(db, job_id)["waiting_event"] == "go", "the job waits")
    app.send_event(job_id, "other-event", 1)
    assert job_row(db, job_id)["run_at"].year == 9999  # no timeout
    assert queue.delete(job_id) and queue.delete(other)
    assert db.execute("SELECT (SELECT count(*) FROM job_steps) AS steps, "
                      "(SELECT count(*) FROM job_events) AS events").fetchone() == {
        "steps": 0, "events": 0}


def test_a_job_woken_early_sleeps_again_until_its_time(
    app: pgbaton.App, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]
) -> None:
    """An operator's run-now wakes a sleeping job before its time: the run replays and
    suspends again until the stored wake time, which does not move."""

    @app.task(pass_context=True)
    async def long_nap(ctx: pgbaton.JobContext) -> str:
        await ctx.sleep(3600)
        return "rested"

    job_id = long_nap.defer()
    with WorkerThread(app, poll_interval=0.05):
        # Asleep, not merely not claimed yet: a loaded machine may poll before the
        # worker's first claim, when the job is pending and due at its enqueue time.
        first = until(lambda: (r := job_row(db, job_id))["claim_token"] is None
                      and r["status"] == "pending"
                      and r["run_at"] > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30)
                      and r["run_at"], "the job sleeps")
        assert queue.run_now(job_id)
        until(lambda: job_row(db, job_id)["run_at"] == first
              and job_row(db, job_id)["status"] == "pending", "asleep again")
    row = job_row(db, job_id)
    assert row["attempts"] == 0
    assert steps_of(db, job_id) == [(0, "sleep", "sleep", False)]


def test_an_event_sent_while_its_job_runs_makes_the_suspended_job_due_at_once(
    queue: pgbaton.Queue, db: psycopg.Connection[DictRow]
) -> None:
    """An event that arrives after the handler looked for it and before the job is
    suspended is not lost: the suspend finds it and the job is due now."""
    job_id = queue.enqueue("waiter")
    [claim] = queue.claim("w1")
    assert queue.step_event_take(claim, 0, "go") == (False, None)
    assert queue.send_event(job_id, "go", 5) is False  # running: kept, not woken
    wake = queue.step_suspend(claim, 0, "go", "event", until=None, seconds=3600,
                              deadline=True, event="go")
    assert wake is not None and wake < dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    row = job_row(db, job_id)
    assert (row["status"], row["attempts"], row["claim_token"]) == ("pending", 0, None)
    assert row["run_at"] <= dt.datetime.now(dt.UTC)
    # The stale claim can write nothing any more.
    assert queue.step_store(claim, 1, "late", "1", 0.0) is False
    assert queue.step_event_take(claim, 0, "go") == (False, None)
    [again] = queue.claim("w2")
    assert queue.step_event_take(again, 0, "go") == (True, {"payload": 5})
    assert steps_of(db, job_id) == [(0, "go", "event", True)]


def test_archived_and_pruned_jobs_leave_without_their_steps(
    app: pgbaton.App, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]
) -> None:
    """Both retention modes: a done job moved to jobs_history keeps its result, not its
    steps; a pruned one takes them too; a job with steps still running keeps them."""

    @app.task(pass_context=True)
    async def stepped(ctx: pgbaton.JobContext, n: int) -> Any:
        return await ctx.step("only", lambda: n)

    archived, pruned = stepped.defer(n=1), stepped.defer(n=2)
    with WorkerThread(app, poll_interval=0.05):
        for job_id in (archived, pruned):
            wait_for_job(app, job_id, timeout=DEADLINE)
    kept = queue.enqueue("stepped", {"n": 3})
    db.execute("UPDATE jobs SET has_steps = true WHERE id = %s", [kept])
    db.execute("INSERT INTO job_steps (job_id, seq, name, kind, finished_at) "
               "VALUES (%s, 0, 'only', 'step', now())", [kept])
    db.execute("UPDATE jobs SET idempotency_key = 'keep-me' WHERE id = %s", [pruned])
    assert queue.archive(after=0, partition=24 * 3600) == 1
    moved = queue.get(archived)
    assert moved is not None and moved.result == 1 and queue.steps(archived) == []
    assert queue.prune(retention=0) >= 1
    assert queue.get(pruned) is None and queue.steps(pruned) == []
    assert [s.name for s in queue.steps(kept)] == ["only"]


def test_only_a_jobs_first_step_writes_its_row(
    queue: pgbaton.Queue, db: psycopg.Connection[DictRow]
) -> None:
    """The first step marks the job as one with steps; later steps only lock its row
    (no new row version in jobs), and a lost claim stores nothing."""
    job_id = queue.enqueue("stepper")
    [claim] = queue.claim("w1")

    def version() -> str:
        return str(db.execute("SELECT xmin::text AS v FROM jobs WHERE id = %s",
                              [job_id]).fetchone()["v"])  # type: ignore[index]

    before = version()
    assert queue.step_store(claim, 0, "one", "1", 0.01)
    marked = version()
    assert marked != before and job_row(db, job_id)["has_steps"] is True
    assert queue.step_store(claim, 1, "two", '{"a": 2}', 0.01)
    assert version() == marked
    queue.cancel(job_id)
    assert queue.step_store(claim, 2, "three", "3", 0.01) is False
    assert [(s.name, s.result, s.size) for s in queue.steps(job_id)] == [
        ("one", 1, 1), ("two", {"a": 2}, 8)]


@pytest.mark.parametrize(("payload", "says"), [
    ("[" * 300 + "]" * 300, "nested too deeply"),
    ('{"n": ' + "7" * 5000 + "}", "4,300 digits"),
])
def test_send_event_in_sql_refuses_what_the_worker_could_not_read(
        queue: pgbaton.Queue, db, payload: str, says: str) -> None:
    """The SQL API's send_event holds payloads to what enqueue() holds args to: a worker
    must be able to read back what it stores."""
    job_id = queue.enqueue("t")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=says):
        db.execute(f'SELECT "{queue.schema}".send_event(%s, %s, %s::jsonb)',
                   (job_id, "e", payload))
    assert db.execute("SELECT count(*) AS n FROM job_events").fetchone()["n"] == 0


def _waiting(queue: pgbaton.Queue, db: psycopg.Connection[DictRow], *,
             queue_name: str = "default", seconds: float = 3600) -> int:
    """A job suspended on a wait for event 'go', as a worker leaves it."""
    job_id = queue.enqueue("waiter", queue=queue_name, max_attempts=3)
    [claim] = queue.claim("w1", queues=[queue_name])
    assert claim.id == job_id
    assert queue.step_suspend(claim, 0, "go", "event", until=None, seconds=seconds,
                              deadline=True, event="go") is not None
    assert job_row(db, job_id)["waiting_event"] == "go"
    return job_id


def _event_of(db: psycopg.Connection[DictRow], job_id: int) -> tuple[str, str | None]:
    row = job_row(db, job_id)
    return row["status"], row["waiting_event"]


def test_waiting_event_is_null_unless_the_job_waits_now(
    queue: pgbaton.Queue, db: psycopg.Connection[DictRow]
) -> None:
    """Every path that ends a job waiting for an event, or moves it out of its wait,
    leaves waiting_event NULL: cancelled (one job, or the operator's bulk action) and
    retried by an operator; claimed (woken by its event, its timeout or run-now, from a
    plain or a limited queue), and then failed, retried, discarded, cancelled by its
    handler, snoozed, done or reaped. Paths that leave it waiting keep it. In SQL."""
    # Cancelled while it waits, then retried by an operator.
    job_id = _waiting(queue, db)
    assert queue.cancel(job_id)
    assert _event_of(db, job_id) == ("cancelled", None)
    assert queue.retry(job_id)
    assert _event_of(db, job_id) == ("pending", None)
    queue.delete(job_id)
    job_id = _waiting(queue, db)
    assert queue.cancel_matching(pgbaton.JobFilter(), upto=job_id) == 1
    assert _event_of(db, job_id) == ("cancelled", None)
    assert queue.retry_matching(pgbaton.JobFilter(), upto=job_id) == 1
    assert _event_of(db, job_id) == ("pending", None)
    queue.delete(job_id)

    # Woken early (run-now, a priority change): still waiting until it is claimed.
    job_id = _waiting(queue, db)
    assert queue.set_priority(job_id, 5) and queue.run_now(job_id)
    assert _event_of(db, job_id) == ("pending", "go")
    [claim] = queue.claim("w2")
    assert _event_of(db, job_id) == ("running", None)  # woken: no longer waiting
    assert queue.fail(claim, "broke before its wait", retry_in=0)
    assert _event_of(db, job_id) == ("pending", None)
    queue.delete(job_id)

    # Woken by its event and by its timeout, then each way a run ends.
    ends: dict[str, Any] = {
        "done": lambda c: queue.complete(c, 1),
        "failed": lambda c: queue.fail(c, "broke for good", retry_in=None),
        "discarded": lambda c: queue.end_many([(c, "failed", pgbaton.Discard("no"))]),
        "cancelled": lambda c: queue.end_many([(c, "cancelled", pgbaton.Cancel("no"))]),
        "snoozed": lambda c: queue.snooze(c, pgbaton.Snooze(60)),
    }
    for how, end in ends.items():
        job_id = _waiting(queue, db, seconds=0 if how == "failed" else 3600)
        if how != "failed":  # that one's timeout has passed: it is due already
            assert queue.send_event(job_id, "go", how) is True
        [claim] = queue.claim("w2")
        assert _event_of(db, job_id) == ("running", None), how
        end(claim)
        status, event = _event_of(db, job_id)
        assert event is None and status != "running", how
        queue.delete(job_id)

    # Reaped: its worker died after the wake-up's claim.
    job_id = _waiting(queue, db, seconds=0)
    queue.claim("w2")
    db.execute("UPDATE jobs SET lease_until = now() - interval '1 second' WHERE id = %s",
               [job_id])
    assert queue.reap() == 1
    assert _event_of(db, job_id) == ("pending", None)
    queue.delete(job_id)

    # Claimed from a limited queue (the flow claim, a function of its own).
    queue.set_concurrency("limited", 5)
    job_id = _waiting(queue, db, queue_name="limited", seconds=0)
    assert [c.id for c in queue.claim("w2", queues=["limited"])] == [job_id]
    assert _event_of(db, job_id) == ("running", None)
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE waiting_event IS NOT NULL "
                      "AND status <> 'pending'").fetchone() == {"n": 0}

    # The rule is the database's (jobs_waiting_event_only_pending): a statement that
    # moves a waiting job out of pending without clearing the column, present or future,
    # is refused, and so is a column set on a job that is not pending.
    job_id = _waiting(queue, db)
    for status in ("running", "done", "failed", "cancelled", "waiting"):
        with pytest.raises(psycopg.errors.CheckViolation,
                           match="jobs_waiting_event_only_pending"):
            db.execute(  # each state's other columns as the other constraints want them
                "UPDATE jobs SET status = %(status)s, waiting_for = 1, "
                "claim_token = CASE WHEN %(status)s = 'running' THEN gen_random_uuid() END, "
                "lease_until = CASE WHEN %(status)s = 'running' THEN now() END "
                "WHERE id = %(id)s", {"status": status, "id": job_id})
    assert _event_of(db, job_id) == ("pending", "go")
    done = queue.enqueue("t")
    db.execute("UPDATE jobs SET status = 'done' WHERE id = %s", [done])
    with pytest.raises(psycopg.errors.CheckViolation,
                       match="jobs_waiting_event_only_pending"):
        db.execute("UPDATE jobs SET waiting_event = 'go' WHERE id = %s", [done])


def test_a_waiting_job_cancelled_and_retried_waits_again_through_the_worker(
    app: pgbaton.App, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]
) -> None:
    """Through a worker: a job cancelled while it waits says it waits for nothing; an
    operator's retry runs it again, its stored steps replayed, and it waits again (the
    column honest both ways); its event then reaches it."""
    calls: Counter[str] = Counter()

    @app.task(pass_context=True)
    async def waiter(ctx: pgbaton.JobContext) -> Any:
        await ctx.step("one", lambda: calls.update(["one"]))
        return await ctx.wait_for("go")

    job_id = waiter.defer()
    with WorkerThread(app, poll_interval=0.05):
        until(lambda: _event_of(db, job_id) == ("pending", "go"), "the job waits")
        assert queue.cancel(job_id)
        assert _event_of(db, job_id) == ("cancelled", None)
        assert queue.retry(job_id)
        until(lambda: _event_of(db, job_id) == ("pending", "go")
              and job_row(db, job_id)["claim_token"] is None, "the job waits again")
        assert app.send_event(job_id, "go", "went") is True
        job = wait_for_job(app, job_id, timeout=DEADLINE)
    assert (job.status, job.result, calls["one"]) == ("done", "went", 1)
    assert _event_of(db, job_id) == ("done", None)
