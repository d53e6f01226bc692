"""Batches (docs/explanation/dependencies.md): the callbacks are enqueued once, when the
last job of the batch ends, whichever path ends it; bad input is refused with nothing
written."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton import Batch, Callback
from tests.helpers import wait_for_lease_to_pass

BOTH = Batch(
    on_finish=Callback("finished", {"user": 7}, queue="notices", priority=3),
    on_success=Callback("succeeded"),
)


def finish(queue: pgbaton.Queue, task: str, *, ok: bool = True) -> int:
    """Claim the one claimable job of `task` and complete or fail it; its id."""
    [claim] = queue.claim("w", tasks=[task])
    assert (queue.complete(claim) if ok else queue.fail(claim, "boom", retry_in=0))
    return claim.id


def callbacks(db: psycopg.Connection[Any]) -> list[tuple[str, dict[str, Any]]]:
    rows = db.execute(
        "SELECT task, args FROM jobs WHERE task IN ('finished', 'succeeded') ORDER BY task"
    )
    return [(row["task"], row["args"]) for row in rows]


def counts(batch_id: int, jobs: int, done: int = 0, failed: int = 0, cancelled: int = 0):
    return {"id": batch_id, "jobs": jobs, "done": done, "failed": failed, "cancelled": cancelled}


def test_the_last_job_done_enqueues_both_callbacks_once(queue, db):
    """on_finish and on_success with their args plus the batch's counts, once; the
    callback jobs keep their queue and priority."""
    ids = queue.enqueue_many([{"task": "a"}, {"task": "b"}, {"task": "c"}], batch=BOTH)
    batch_id = queue.get(ids[0]).batch_id  # type: ignore[union-attr]
    assert batch_id is not None and {queue.get(i).batch_id for i in ids} == {batch_id}  # type: ignore[union-attr]
    finish(queue, "a")
    finish(queue, "b", ok=False)  # a failed attempt with attempts left is no end
    assert callbacks(db) == []
    assert queue.batch(batch_id).jobs_left == 2  # type: ignore[union-attr]
    finish(queue, "b")
    finish(queue, "c")
    assert callbacks(db) == [
        ("finished", {"user": 7, "batch": counts(batch_id, 3, done=3)}),
        ("succeeded", {"batch": counts(batch_id, 3, done=3)}),
    ]
    row = db.execute(
        "SELECT queue, priority, status FROM jobs WHERE task = 'finished'"
    ).fetchone()
    assert row == {"queue": "notices", "priority": 3, "status": "pending"}
    info = queue.batch(batch_id)
    assert (info.jobs_left, info.done, info.finished_at is not None) == (0, 3, True)  # type: ignore[union-attr]


def test_a_failure_a_cancel_and_the_reaper_are_ends_and_on_success_is_skipped(queue, db):
    """Every kind of end counts once; with anything not done, only on_finish comes."""
    ids = queue.enqueue_many(
        [{"task": "fails", "max_attempts": 1}, {"task": "cancelled"},
         {"task": "reaped", "max_attempts": 1}, {"task": "deleted"}, {"task": "ok"}],
        batch=BOTH,
    )
    batch_id = queue.get(ids[0]).batch_id  # type: ignore[union-attr]
    finish(queue, "fails", ok=False)
    assert queue.cancel(ids[1])
    [held] = queue.claim("w", tasks=["reaped"], lease=0.05)
    wait_for_lease_to_pass(db, held.id)
    assert queue.reap() == 1
    assert queue.delete(ids[3])
    assert callbacks(db) == []
    finish(queue, "ok")
    assert callbacks(db) == [
        ("finished", {"user": 7, "batch": counts(batch_id, 5, done=1, failed=2, cancelled=2)}),
    ]


def test_a_retry_takes_an_end_back_until_the_batch_has_finished(queue, db):
    """A member retried before the batch finishes counts again; after it finished, a
    batch finishes once and members no longer count."""
    ids = queue.enqueue_many(
        [{"task": "flaky", "max_attempts": 1}, {"task": "slow"}], batch=BOTH
    )
    batch_id = queue.get(ids[0]).batch_id  # type: ignore[union-attr]
    finish(queue, "flaky", ok=False)
    assert queue.batch(batch_id).failed == 1  # type: ignore[union-attr]
    assert queue.retry(ids[0])
    info = queue.batch(batch_id)
    assert (info.jobs_left, info.failed) == (2, 0)  # type: ignore[union-attr]
    finish(queue, "flaky")
    finish(queue, "slow")
    assert [task for task, _ in callbacks(db)] == ["finished", "succeeded"]

    # Finished: a member failed again and retried changes nothing.
    ids = queue.enqueue_many([{"task": "once", "max_attempts": 1}], batch=BOTH)
    finish(queue, "once", ok=False)
    assert queue.retry(ids[0])
    finish(queue, "once", ok=False)
    assert [task for task, _ in callbacks(db)] == ["finished", "finished", "succeeded"]
    info = queue.batch(queue.get(ids[0]).batch_id)  # type: ignore[arg-type, union-attr]
    assert (info.jobs_left, info.failed) == (0, 1)  # type: ignore[union-attr]


def test_dependencies_inside_a_batch_and_a_batch_that_ends_at_enqueue(queue, db):
    """A member cancelled because its parent failed is an end; a batch whose every job
    is cancelled at enqueue (a parent had failed already) calls back at once."""
    ids = queue.enqueue_many(
        [{"task": "extract", "label": "e", "max_attempts": 1},
         {"task": "load", "after": ["e"]},
         {"task": "report", "after": ["e"], "after_failure": "run"}],
        batch=Batch(on_finish=Callback("finished")),
    )
    finish(queue, "extract", ok=False)
    assert [queue.get(i).status for i in ids] == ["failed", "cancelled", "pending"]  # type: ignore[union-attr]
    finish(queue, "report")
    batch_id = queue.get(ids[0]).batch_id  # type: ignore[union-attr]
    assert callbacks(db) == [
        ("finished", {"batch": counts(batch_id, 3, done=1, failed=1, cancelled=1)}),
    ]
    doomed = queue.enqueue_many(
        [{"task": "x", "after": [ids[0]]}], batch=Batch(on_finish=Callback("finished"))
    )
    assert queue.get(doomed[0]).status == "cancelled"  # type: ignore[union-attr]
    assert len(callbacks(db)) == 2


def test_a_rolled_back_batch_leaves_nothing(queue, dsn, db):
    with psycopg.connect(dsn) as conn:
        queue.enqueue_many([{"task": "a"}], batch=BOTH, conn=conn)
        conn.rollback()
    assert db.execute(
        "SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM batches) AS batches"
    ).fetchone() == {"jobs": 0, "batches": 0}


def test_bad_batches_are_refused_with_one_line_and_nothing_written(queue, db):
    cases: list[tuple[list[dict[str, Any]], Any, str]] = [
        ([], BOTH, "a batch needs at least one job"),
        ([{"task": "a"}], "yes", "batch must be a pgbaton.Batch or None, got 'yes'"),
        ([{"task": "a"}], Batch(on_finish="finished"),  # type: ignore[arg-type]
         "batch on_finish must be a pgbaton.Callback or None, got 'finished'"),
        ([{"task": "a"}], Batch(on_success=Callback("s", {"batch": 1})),
         "on_success callback 's': its args cannot contain 'batch'"),
        ([{"task": "a"}], Batch(on_finish=Callback("")), "task must be a non-empty string"),
        ([{"task": "a"}], Batch(on_finish=Callback("f", {"x": object()})),
         "args of the on_finish callback 'f' cannot be stored as JSON"),
        ([{"task": "a"}], Batch(on_finish=Callback("f", max_attempts=0)), "max_attempts"),
        ([{"task": "a", "idempotency_key": "k"}], BOTH, "idempotency_key cannot be combined"),
        ([{"task": "a"}, {"task": ""}], BOTH, "job 1: task must be a non-empty string"),
    ]
    for jobs, batch, message in cases:
        with pytest.raises((pgbaton.InvalidArgument, pgbaton.NotSerializable)) as caught:
            queue.enqueue_many(jobs, batch=batch)
        assert message in str(caught.value) and "\n" not in str(caught.value), message
    assert db.execute(
        "SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM batches) AS batches"
    ).fetchone() == {"jobs": 0, "batches": 0}
    assert queue.batch(12345) is None


async def test_the_async_queue_takes_a_batch(aqueue):
    ids = await aqueue.enqueue_many([{"task": "a"}], batch=Batch(on_success=Callback("s")))
    [claim] = await aqueue.claim("w")
    await aqueue.complete(claim)
    [callback] = await aqueue.claim("w")
    batch_id = (await aqueue.get(ids[0])).batch_id  # type: ignore[union-attr]
    assert (callback.task, callback.args) == ("s", {"batch": counts(batch_id, 1, done=1)})


def app_of(queue: pgbaton.Queue) -> pgbaton.App:
    """An App on the queue's schema with three tasks: a member and two callbacks."""
    app = pgbaton.App(queue.dsn, schema=queue.schema)

    @app.task(name="a")
    def a() -> None: ...

    @app.task(name="finished")
    def finished(batch: dict[str, Any], user: int = 0) -> None: ...

    @app.task(name="succeeded")
    def succeeded(batch: dict[str, Any]) -> None: ...

    return app


def nothing_written(db: psycopg.Connection[Any]) -> bool:
    return db.execute(
        "SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM batches) AS batches"
    ).fetchone() == {"jobs": 0, "batches": 0}


async def test_an_apps_enqueue_many_refuses_a_task_it_does_not_register(queue, db):
    """A member job or a callback of a task the App lacks: UnknownTask naming each such
    task once, where it first appears, and the App's tasks; nothing is written, on every
    path (plain, COPY, labels, batch, async)."""
    app = app_of(queue)
    cases: list[tuple[list[dict[str, Any]], Batch | None, str]] = [
        ([{"task": "a"}, {"task": "b"}, {"task": "b"}], None,
         "no task named 'b' (job 1) is registered in this App (it has: a, finished, "
         "succeeded); nothing was written"),
        ([{"task": "a"}] * 600 + [{"task": "b"}], None, "'b' (job 600)"),
        ([{"task": "a", "label": "x"}, {"task": "c", "after": ["x"]}], None, "'c' (job 1)"),
        ([{"task": "a"}], Batch(on_finish=Callback("finish")),
         "no task named 'finish' (the batch's on_finish) is registered"),
        ([{"task": "a"}], Batch(on_finish=Callback("finished"), on_success=Callback("ok")),
         "'ok' (the batch's on_success)"),
        ([{"task": "b"}], Batch(on_success=Callback("ok")),
         "no tasks named 'b' (job 0), 'ok' (the batch's on_success) are registered"),
        ([{"task": f"t{n}"} for n in range(7)], None, "'t4' (job 4) and 2 more are"),
    ]
    for jobs, batch, message in cases:
        with pytest.raises(pgbaton.UnknownTask) as caught:
            app.enqueue_many(jobs, batch=batch)
        assert message in str(caught.value) and "\n" not in str(caught.value), caught.value
        with pytest.raises(pgbaton.UnknownTask, match="registered in this App"):
            await app.enqueue_many_async(jobs, batch=batch)
    assert nothing_written(db)
    ids = app.enqueue_many([{"task": "a"}] * 2, batch=BOTH)
    app.queue.close()
    assert len(ids) == 2 and db.execute("SELECT count(*) AS n FROM batches").fetchone() == {"n": 1}


def test_inline_mode_refuses_an_unknown_callback_before_any_job_runs(queue, db):
    app = app_of(queue)
    ran: list[int] = []

    @app.task(name="member")
    def member(n: int) -> None:
        ran.append(n)

    with pgbaton.testing.inline(app), pytest.raises(pgbaton.UnknownTask, match="'nope'"):
        app.enqueue_many([{"task": "member", "args": {"n": 1}}],
                         batch=Batch(on_finish=Callback("nope")))
    assert ran == []
    assert nothing_written(db)


def test_an_apps_enqueue_many_gives_each_job_its_tasks_queue_and_settings(queue, db):
    """A job or callback that names no queue, max_attempts or key gets its task's, as
    task.enqueue() gives them: a worker of the task's queue would never see a job put
    in 'default'. What the caller gives wins, and args the handler cannot take are
    refused before anything is written."""
    app = pgbaton.App(queue.dsn, schema=queue.schema)

    @app.task(name="mail", queue="emails", max_attempts=2, key=lambda to: f"to:{to}")
    def mail(to: str) -> None: ...

    @app.task(name="report", queue="reports", max_attempts=9)
    def report(batch: dict[str, Any]) -> None: ...

    app.enqueue_many(
        [{"task": "mail", "args": {"to": "a"}},
         {"task": "mail", "args": {"to": "b"}, "queue": "urgent", "max_attempts": 4}],
        batch=Batch(on_finish=Callback("report")),
    )
    rows = db.execute("SELECT queue, max_attempts, key FROM jobs ORDER BY id").fetchall()
    assert rows == [{"queue": "emails", "max_attempts": 2, "key": "to:a"},
                    {"queue": "urgent", "max_attempts": 4, "key": "to:b"}]
    on_finish = db.execute("SELECT on_finish FROM batches").fetchone()["on_finish"]
    assert (on_finish["queue"], on_finish["max_attempts"]) == ("reports", 9)
    with pytest.raises(pgbaton.InvalidArgument, match="unexpected 'too'"):
        app.enqueue_many([{"task": "mail", "args": {"to": "c"}},
                          {"task": "mail", "args": {"too": "d"}}])
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 2}
    app.queue.close()
