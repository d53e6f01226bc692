"""Hostile input to App.enqueue_many and task.enqueue (issue 25): args that are not a
mapping, keys that raise, callbacks whose handler cannot take their args, one bad job
among 10,000. Each is refused with InvalidArgument (or the key's own error) and
nothing is written, which the jobs and batches tables say."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton import Batch, Callback

NOT_MAPPINGS: list[Any] = [[1, 2], "ab", [("a", 1)], 5, b"ab"]


def nothing_written(db: psycopg.Connection[Any]) -> bool:
    return db.execute(
        "SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM batches)"
        " AS batches").fetchone() == {"jobs": 0, "batches": 0}


def probe_app(queue: pgbaton.Queue) -> pgbaton.App:
    app = pgbaton.App(queue.dsn, schema=queue.schema)

    @app.task(name="plain")
    def plain(a: int = 1) -> None: ...

    @app.task(name="keyed", queue="keys", key=lambda a=0: f"k{a}")
    def keyed(a: int = 0) -> None: ...

    @app.task(name="bad_key", key=lambda a: 1 // a)
    def bad_key(a: int) -> None: ...

    @app.task(name="report")
    def report(batch: dict[str, Any], title: str = "") -> None: ...

    @app.task(name="no_batch_param")
    def no_batch_param(title: str = "") -> None: ...

    return app


@pytest.mark.parametrize("args", NOT_MAPPINGS, ids=repr)
def test_args_that_are_not_a_mapping_are_refused_as_invalid(queue, db, args: Any) -> None:
    """The bare Queue says 'job N: args ... must be a mapping'; the App's enqueue_many
    and task.enqueue, which check args against the handler first, said TypeError or
    ValueError from dict(), or from the key callable's ** (a list of pairs)."""
    app = probe_app(queue)
    for task in ("plain", "keyed"):
        with pytest.raises(pgbaton.InvalidArgument,
                           match=f"job 1: args for task '{task}' must be a mapping"):
            app.enqueue_many([{"task": task, "args": {}}, {"task": task, "args": args}])
        with pytest.raises(pgbaton.InvalidArgument,
                           match=f"args for task '{task}' must be a mapping"):
            app.tasks[task].enqueue(args)
    assert nothing_written(db)
    app.queue.close()


def test_a_callback_whose_handler_cannot_take_its_args_is_refused(queue, db) -> None:
    """A callback is enqueued when its batch ends, maybe hours later, with its args
    plus `batch`: args its handler cannot take are refused now, as a member job's are,
    rather than failing for good once the batch is over."""
    app = probe_app(queue)
    member = [{"task": "plain", "args": {"a": 2}}]
    bad = [
        (Batch(on_finish=Callback("report", {"titel": "x"})), "unexpected 'titel'"),
        (Batch(on_success=Callback("no_batch_param")), "unexpected 'batch'"),
        (Batch(on_finish=Callback("report"), on_success=Callback("plain")),
         "unexpected 'batch'"),
    ]
    for batch, message in bad:
        with pytest.raises(pgbaton.InvalidArgument, match=message) as caught:
            app.enqueue_many(member, batch=batch)
        assert "callback" in str(caught.value), caught.value
    assert nothing_written(db)
    app.enqueue_many(member, batch=Batch(on_finish=Callback("report", {"title": "t"})))
    assert db.execute("SELECT count(*) AS n FROM batches").fetchone() == {"n": 1}
    app.queue.close()


BAD_AMONG_MANY: list[tuple[dict[str, Any], type[BaseException], str]] = [
    ({"task": "nope"}, pgbaton.UnknownTask, "'nope' \\(job 5000\\)"),
    ({"task": "plain", "args": {"b": 1}}, pgbaton.InvalidArgument,
     "job 5000: task 'plain' cannot take these args: unexpected 'b'"),
    ({"task": "plain", "args": [("a", 1)]}, pgbaton.InvalidArgument, "job 5000: args"),
    ({"task": "bad_key", "args": {"a": 0}}, ZeroDivisionError, "division"),
    ({"task": "keyed", "priority": "high"}, pgbaton.InvalidArgument, "job 5000"),
    ({"task": "plain", "args": {"a": 1}, "max_attempts": 0}, pgbaton.InvalidArgument,
     "job 5000"),
    ("plain", pgbaton.InvalidArgument, "job 5000"),
]


@pytest.mark.parametrize("case", BAD_AMONG_MANY,
                         ids=[str(i) for i in range(len(BAD_AMONG_MANY))])
@pytest.mark.parametrize("with_batch", [False, True], ids=["plain", "batch"])
def test_one_bad_job_among_ten_thousand_writes_nothing(
    queue, db, case: tuple[Any, type[BaseException], str], with_batch: bool
) -> None:
    bad, error, message = case
    app = probe_app(queue)
    jobs: list[Any] = [
        {"task": ("plain", "keyed", "bad_key")[n % 3], "args": {"a": n % 7 + 1}}
        for n in range(10_000)
    ]
    jobs[5000] = bad
    batch = Batch(on_finish=Callback("report")) if with_batch else None
    with pytest.raises(error, match=message):
        app.enqueue_many(jobs, batch=batch)
    assert nothing_written(db)
    jobs[5000] = {"task": "plain"}
    assert len(app.enqueue_many(jobs, batch=batch)) == 10_000
    assert db.execute("SELECT count(*) AS n, count(*) FILTER (WHERE queue = 'keys'"
                      " AND key IS NOT NULL) AS keyed FROM jobs").fetchone() == {
        "n": 10_000, "keyed": 3333}
    app.queue.close()
