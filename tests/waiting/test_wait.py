"""App.wait and wait_async (docs/howto/waiting.md): the result once the job is done,
woken by the NOTIFY of its end (the poll made too slow to be what wakes them), the
exception its end means, and a missing or archived job answered at once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton import waiting

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def app(dsn: str, schema: str, queue: pgbaton.Queue, monkeypatch) -> pgbaton.App:
    """An App on the test schema whose waiters' fallback poll comes only every 60 s:
    a wait that ends sooner was woken by a notification."""
    monkeypatch.setattr(waiting, "POLL_SECONDS", 60.0)
    return pgbaton.App(dsn, schema=schema)


def finish_later(queue: pgbaton.Queue, job_id: int, how: Callable[[Any], Any],
                 after: float = 0.3) -> threading.Thread:
    """Claim the job and end it `after` seconds from now, on another thread."""
    def run() -> None:
        time.sleep(after)
        how(queue)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def claimed(queue: pgbaton.Queue, job_id: int) -> pgbaton.Claim:
    [claim] = queue.claim("w", limit=1)
    assert claim.id == job_id
    return claim


def test_wait_returns_the_result_when_the_job_is_done(app, queue):
    job_id = queue.enqueue("t")
    claim = claimed(queue, job_id)
    thread = finish_later(queue, job_id, lambda q: q.complete(claim, {"total": 42}))
    started = time.monotonic()
    assert app.wait(job_id, timeout=30) == {"total": 42}
    assert time.monotonic() - started < 10  # the poll would take 60 s
    thread.join()


async def test_wait_async_returns_the_result_when_the_job_is_done(app, queue):
    job_id = queue.enqueue("t")
    claim = claimed(queue, job_id)
    thread = finish_later(queue, job_id, lambda q: q.complete(claim, [1, "two"]))
    assert await app.wait_async(job_id, timeout=30) == [1, "two"]
    thread.join()


def test_a_failure_raises_job_failed_with_its_errors_after_the_last_attempt(app, queue):
    job_id = queue.enqueue("t", max_attempts=2)

    def fail_twice(q: pgbaton.Queue) -> None:
        q.fail(claimed(q, job_id), "first", retry_in=0)  # a retry: the wait goes on
        time.sleep(0.2)
        q.fail(claimed(q, job_id), ValueError("card declined"))

    thread = finish_later(queue, job_id, fail_twice)
    with pytest.raises(pgbaton.JobFailed) as failed:
        app.wait(job_id, timeout=30)
    thread.join()
    assert failed.value.job_id == job_id
    assert [e["message"] for e in failed.value.errors] == ["first", "card declined"]
    assert "failed after 2 attempts: ValueError: card declined" in str(failed.value)


def test_job_failed_counts_the_attempts_the_job_spent_not_its_error_records(app, queue):
    """A job that only ever snoozed ends failed with one error record (SnoozeLimit) and
    no attempt spent; a job whose worker died before it started has a record for an
    attempt given back. The message counts the job's attempts, as `pgbaton show` does."""
    job_id = queue.enqueue("t")
    for _ in range(2):
        queue.snooze(claimed(queue, job_id), pgbaton.Snooze(0), max_snoozes=1)
    with pytest.raises(pgbaton.JobFailed) as failed:
        app.wait(job_id, timeout=30)
    assert [e["type"] for e in failed.value.errors] == ["SnoozeLimit"]
    assert failed.value.attempts == 0
    assert str(failed.value).startswith(f"job {job_id} (task 't') failed: SnoozeLimit: ")

    second = queue.enqueue("t", max_attempts=1)
    queue.fail(claimed(queue, second), ValueError("no"))
    with pytest.raises(pgbaton.JobFailed, match=r"failed after 1 attempt: ValueError: no"):
        app.wait(second, timeout=30)


async def test_a_cancel_raises_job_cancelled(app, queue):
    job_id = queue.enqueue("t", delay=3600)
    thread = finish_later(queue, job_id, lambda q: q.cancel(job_id))
    with pytest.raises(pgbaton.JobCancelled, match=f"job {job_id} .task 't'. was cancelled"):
        await app.wait_async(job_id, timeout=30)
    thread.join()


def test_a_timeout_raises_timeout_error_and_the_job_stays_as_it_was(app, queue, db):
    job_id = queue.enqueue("t", delay=3600)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"job {job_id} has not ended after 0.3 s"):
        app.wait(job_id, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 5
    row = db.execute("SELECT status, awaited FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == {"status": "pending", "awaited": True}


async def test_an_async_timeout_raises_timeout_error(app, queue):
    job_id = queue.enqueue("t", delay=3600)
    with pytest.raises(TimeoutError):
        await app.wait_async(job_id, timeout=0.2)


def test_a_job_that_ended_already_or_was_archived_answers_at_once(app, queue, db):
    job_id = queue.enqueue("t")
    queue.complete(claimed(queue, job_id), "early")
    assert app.wait(job_id, timeout=0) == "early"
    db.execute("UPDATE jobs SET finished_at = now() - interval '1 day' WHERE id = %s",
               (job_id,))
    assert queue.archive(after=60, partition=3600) == 1
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}
    assert app.wait(job_id, timeout=0) == "early"


async def test_a_missing_or_deleted_job_raises_job_not_found(app, queue):
    with pytest.raises(pgbaton.JobNotFound, match="there is no job 999"):
        await app.wait_async(999, timeout=5)
    job_id = queue.enqueue("t", delay=3600)
    thread = finish_later(queue, job_id, lambda q: q.delete(job_id))
    with pytest.raises(pgbaton.JobNotFound, match=f"job {job_id} was deleted"):
        app.wait(job_id, timeout=30)
    thread.join()


@pytest.mark.parametrize("bad", [0, -1, True, "1", 2**63])
def test_a_bad_id_or_timeout_is_refused(app, bad):
    with pytest.raises(pgbaton.InvalidArgument):
        app.wait(bad, timeout=1)
    with pytest.raises(pgbaton.InvalidArgument, match="timeout"):
        app.wait(1, timeout=-1)
    with pytest.raises(pgbaton.InvalidArgument, match="timeout"):
        app.wait(1, timeout=float("nan"))


def test_only_an_awaited_job_sends_a_notification_at_its_end(dsn, schema, queue, db):
    listener = psycopg.connect(dsn, autocommit=True)
    listener.execute(f'LISTEN "{schema}_ended"')  # type: ignore[arg-type]
    plain, awaited = queue.enqueue("t"), queue.enqueue("t")
    assert queue.mark_awaited(awaited)
    for claim in queue.claim("w", limit=2):
        queue.complete(claim)
    heard = [n.payload for n in listener.notifies(timeout=1)]
    assert heard == [str(awaited)] and plain != awaited
    assert not queue.mark_awaited(awaited)  # ended: nothing to mark
    listener.close()


def test_many_waiters_of_one_process_share_one_listening_connection(app, queue, db, schema):
    ids = [queue.enqueue("t", args={"n": n}) for n in range(40)]
    results: dict[int, Any] = {}

    def wait_for(job_id: int) -> None:
        results[job_id] = app.wait(job_id, timeout=30)

    async def wait_async_for(job_ids: list[int]) -> None:
        answers = await asyncio.gather(*(app.wait_async(i, timeout=30) for i in job_ids))
        results.update(zip(job_ids, answers, strict=True))

    threads = [threading.Thread(target=wait_for, args=(i,)) for i in ids[:20]]
    threads.append(threading.Thread(target=asyncio.run, args=(wait_async_for(ids[20:]),)))
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while db.execute("SELECT count(*) AS n FROM jobs WHERE awaited").fetchone() != {"n": 40}:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    listeners = db.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'pgbaton wait'"
        " AND strpos(query, %s) > 0", (schema,)).fetchone()
    assert listeners == {"n": 1}
    claims = queue.claim("w", limit=40)
    queue.complete_many([(claim, claim.args["n"]) for claim in claims])
    for thread in threads:
        thread.join(30)
    assert results == {job_id: n for n, job_id in enumerate(ids)}


def test_a_wait_from_another_process_is_woken_by_the_end(app, dsn, schema, queue):
    job_id = queue.enqueue("t")
    code = (
        "import json, sys, time, pgbaton\n"
        "from pgbaton import waiting\n"
        "waiting.POLL_SECONDS = 60.0\n"
        f"app = pgbaton.App({dsn!r}, schema={schema!r})\n"
        "print('waiting', flush=True)\n"
        f"print(json.dumps(app.wait({job_id}, timeout=30)), flush=True)\n"
    )
    waiter = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    assert waiter.stdout is not None
    assert waiter.stdout.readline() == "waiting\n"
    deadline = time.monotonic() + 20
    while not _awaited(queue, job_id):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    queue.complete(claimed(queue, job_id), {"from": "elsewhere"})
    out, _ = waiter.communicate(timeout=30)
    assert json.loads(out) == {"from": "elsewhere"} and waiter.returncode == 0


def _awaited(queue: pgbaton.Queue, job_id: int) -> bool:
    with psycopg.connect(queue.dsn) as conn:
        row = conn.execute(f'SELECT awaited FROM "{queue.schema}".jobs WHERE id = %s',  # type: ignore[arg-type]
                           (job_id,)).fetchone()
    return bool(row and row[0])
