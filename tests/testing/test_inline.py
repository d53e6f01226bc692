"""Inline mode: the real checks and the real Executor, no database."""

from __future__ import annotations

from typing import Any

import pytest

import pgbaton
from pgbaton.testing import assert_enqueued, inline

# No DSN anywhere: inline mode must never need one.
app = pgbaton.App("postgresql://nobody@127.0.0.1:1/none")


@app.task
def add(a: int, b: int = 0) -> int:
    return a + b


@app.task
def echo(value: Any) -> Any:
    return value


@app.task
async def unstorable() -> Any:
    return {"at": object()}


def test_options_are_checked_before_anything_runs() -> None:
    """Bad enqueue options and arguments fail as on the real path, and nothing ran."""
    with inline(app) as jobs:
        with pytest.raises(pgbaton.InvalidArgument, match="unexpected 'c'"):
            add.enqueue({"a": 1, "c": 2})
        with pytest.raises(pgbaton.InvalidArgument, match="priority"):
            add.enqueue({"a": 1}, priority="high")
        # A set for an int: refused by the handler's types (typed args) when pydantic
        # is installed, else as JSON cannot hold it (NotSerializable, an InvalidArgument).
        with pytest.raises(pgbaton.InvalidArgument, match="args for task 'add'"):
            add.defer(a={1, 2})  # type: ignore[arg-type]
        with pytest.raises(pgbaton.InvalidArgument, match="missing 'a'"):
            app.queue.enqueue("add", {"b": 1})  # the untyped path checks too
        with pytest.raises(pgbaton.UnknownTask, match="'nope'"):
            app.queue.enqueue("nope", {})
        with pytest.raises(pgbaton.InvalidArgument, match="job 1"):
            app.queue.enqueue_many([{"task": "add", "args": {"a": 1}}, {"args": {}}])
    assert jobs.results == []


def test_the_handler_gets_its_args_as_a_worker_would() -> None:
    """Args come back from JSON (a tuple is a list), and the result check applies."""
    with inline(app, raise_errors=False) as jobs:
        app.queue.enqueue("add", {"a": 1, "b": 2})
        echo.defer(value=(1, {"n": 2}))
        unstorable.defer()
    ran = list(jobs)
    assert [(r.task, r.status, r.result) for r in ran[:2]] == [
        ("add", "done", 3), ("echo", "done", [1, {"n": 2}]),
    ]
    assert (ran[2].status, ran[2].result) == ("failed", None)
    assert ran[2].error is not None
    assert ran[2].error.startswith("NotSerializable: result of task 'unstorable'")


def test_an_idempotency_key_runs_its_job_once() -> None:
    """A repeated idempotency key returns the first job's id, as the database would."""
    with inline(app) as jobs:
        first = add.using(idempotency_key="k").defer(a=1)
        again = add.using(idempotency_key="k").defer(a=5)
        other = add.defer(a=2)
    assert first == again != other
    assert [r.result for r in jobs] == [1, 2]


async def test_inline_in_an_async_test() -> None:
    """defer_async runs on the test's loop; a sync defer there runs on a loop of its own."""
    with inline(app) as jobs:
        await add.defer_async(a=1)
        add.defer(a=2)
        await app.async_queue.enqueue_many([{"task": "add", "args": {"a": 3}}])
    assert [r.result for r in jobs.of(add)] == [1, 2, 3]


def test_the_app_gets_its_queues_back_and_the_rest_needs_a_database() -> None:
    """Inside inline() the database-only calls say so; afterwards the App is as before."""
    before = app.queue
    no_database = pytest.raises(pgbaton.ConfigurationError, match=r"Queue.stats .*inline")
    with inline(app), no_database:
        app.queue.stats()
    assert app.queue is before


def test_assert_enqueued_inside_inline_says_there_is_no_database() -> None:
    """An assertion on pending jobs has nothing to read inline, and says which call."""
    with inline(app), pytest.raises(pgbaton.ConfigurationError, match=r"Queue.jobs .*inline"):
        assert_enqueued(add)
