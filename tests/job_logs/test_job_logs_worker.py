"""Progress and each job's own log lines through the real worker in this process: what
handlers log (async and sync, at once) lands with its own job and attempt, progress
reaches the row while the job runs and at its end, and a task or a worker can turn the
capture off (docs/howto/progress-and-logs.md). Checked in SQL."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton.events import Event
from pgbaton.testing import drain
from pgbaton.worker import Worker, WorkerConfig
from tests.helpers import wait_for

log = logging.getLogger("tests.job_logs_worker")
log.setLevel(logging.DEBUG)  # the root logger stays at WARNING in the test process

DEADLINE_SECONDS = 30.0


@pytest.fixture
def app(queue: pgbaton.Queue, dsn: str, schema: str) -> pgbaton.App:
    return pgbaton.App(dsn, schema=schema)


def lines_of(db: psycopg.Connection[DictRow]) -> dict[tuple[int, int], list[str]]:
    rows = db.execute("SELECT job_id, attempt, lines FROM job_logs ORDER BY job_id, attempt")
    return {(r["job_id"], r["attempt"]): [e["message"] for e in r["lines"]] for r in rows}


def test_concurrent_async_and_sync_handlers_keep_their_own_lines(app, queue, db):
    """Async and sync handlers run at once and log through several loggers, a thread of
    asyncio.to_thread among them: each job's row holds its own lines, in order, and
    nothing logged below the level or by the worker itself."""

    @app.task
    async def async_job(n: int) -> None:
        for step in range(10):
            log.info("async %d step %d", n, step)
            await asyncio.sleep(0.001)
        log.debug("async %d debug: below INFO", n)
        await asyncio.to_thread(logging.getLogger("tests.other").warning, "async %d thread", n)

    @app.task
    def sync_job(n: int) -> None:
        for step in range(10):
            log.info("sync %d step %d", n, step)
            time.sleep(0.001)
        logging.getLogger("tests.other").error("sync %d <b>not markup</b>", n)

    logging.getLogger("tests.other").setLevel(logging.INFO)
    ids = {}
    for n in range(6):
        ids[("async", n)] = async_job.defer(n=n)
        ids[("sync", n)] = sync_job.defer(n=n)
    results = drain(app, concurrency=8)
    assert {r.status for r in results} == {"done"}
    kept = lines_of(db)
    assert set(kept) == {(job_id, 1) for job_id in ids.values()}
    for (kind, n), job_id in ids.items():
        last = f"async {n} thread" if kind == "async" else f"sync {n} <b>not markup</b>"
        assert kept[(job_id, 1)] == [f"{kind} {n} step {s}" for s in range(10)] + [last]
    levels = db.execute("SELECT DISTINCT e->>'level' AS level FROM job_logs,"
                        " jsonb_array_elements(lines) AS e ORDER BY 1").fetchall()
    assert [r["level"] for r in levels] == ["ERROR", "INFO", "WARNING"]


def test_every_attempt_keeps_its_lines_and_the_last_progress(app, queue, db):
    """A failed attempt's lines are kept beside the next one's; the progress reported
    just before the end is written with the outcome, not lost with the flush."""

    @app.task(pass_context=True, max_attempts=3, retry=lambda attempt: 0)
    def flaky(context: pgbaton.JobContext) -> str:
        log.info("attempt %d starts", context.attempt)
        context.progress(context.attempt / 2, note=f"attempt {context.attempt}")
        if context.attempt == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    job_id = flaky.defer()
    [result] = drain(app)
    assert result.status == "done" and result.attempts == 2
    assert lines_of(db) == {(job_id, 1): ["attempt 1 starts"], (job_id, 2): ["attempt 2 starts"]}
    job = queue.get(job_id)
    assert job is not None
    assert (job.progress, job.progress_note, job.progress_stale) == (1.0, "attempt 2", False)
    assert [(k.attempt, k.dropped) for k in queue.logs(job_id)] == [(1, 0), (2, 0)]


def test_a_task_can_turn_the_capture_off(app, queue, db):
    @app.task(job_logs=False)
    async def quiet() -> None:
        log.warning("not kept")

    @app.task
    async def loud() -> None:
        log.warning("kept")

    quiet_id, loud_id = quiet.defer(), loud.defer()
    drain(app)
    assert lines_of(db) == {(loud_id, 1): ["kept"]}
    assert quiet_id not in {job_id for job_id, _ in lines_of(db)}
    with pytest.raises(pgbaton.InvalidArgument, match="job_logs must be True or False"):
        app.task(name="bad", job_logs="no")(lambda: None)  # type: ignore[call-overload]


async def test_a_worker_can_turn_the_capture_off(app, queue, db):
    """WorkerConfig(job_logs=False): no row, and the root logger gets no handler."""

    @app.task
    async def loud() -> None:
        log.warning("not kept by this worker")

    handlers = list(logging.getLogger().handlers)
    job_id = loud.defer()
    worker = Worker(app, WorkerConfig(job_logs=False, maintenance=False, poll_interval=0.05))
    running = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: queue.get(job_id).status == "done", "the job to finish")
        assert logging.getLogger().handlers == handlers
    finally:
        worker.request_stop()
        assert await running == 0
    assert lines_of(db) == {}
    for bad in ("LOUD", -1, True, 1.5):
        with pytest.raises(pgbaton.InvalidArgument, match="job_log_level must be"):
            WorkerConfig(job_log_level=bad)
    with pytest.raises(pgbaton.InvalidArgument, match="job_logs must be True or False"):
        WorkerConfig(job_logs="yes")  # type: ignore[arg-type]
    assert WorkerConfig(job_log_level="warning").job_log_level == logging.WARNING


async def test_progress_reaches_the_row_while_the_job_runs(app, queue, db):
    """Reported from an async handler and from a sync one's thread, the progress is on
    the row within the flush interval while they still run, fenced by their claims,
    and a job.progress event says so; many reports cost one statement a second."""
    release = threading.Event()
    events: list[Event] = []
    app.subscribe(events.append, ["job.progress"])

    @app.task(pass_context=True)
    async def async_job(context: pgbaton.JobContext) -> None:
        for n in range(1000):
            context.progress(n / 1000, note=f"async {n}")
        context.progress(0.5, note="async half")
        while not release.is_set():
            await asyncio.sleep(0.02)
        context.progress(1.0, note="async done")

    @app.task(pass_context=True)
    def sync_job(context: pgbaton.JobContext) -> None:
        context.progress(0.25)
        release.wait(DEADLINE_SECONDS)

    async_id, sync_id = async_job.defer(), sync_job.defer()
    worker = Worker(app, WorkerConfig(concurrency=4, maintenance=False, poll_interval=0.05))
    running = asyncio.create_task(worker.run())
    try:
        def both_reported() -> bool:
            rows = db.execute("SELECT id, progress, progress_note, status FROM jobs"
                              " ORDER BY id").fetchall()
            return [(r["progress"], r["progress_note"], r["status"]) for r in rows] == [
                (0.5, "async half", "running"), (0.25, None, "running")]

        await wait_for(both_reported, "both jobs' progress while they run")
        [listed_async, listed_sync] = sorted(queue.jobs(status="running"), key=lambda j: j.id)
        assert (listed_async.id, listed_async.progress) == (async_id, 0.5)
        assert (listed_sync.id, listed_sync.progress) == (sync_id, 0.25)
        release.set()
        await wait_for(lambda: all(queue.get(i).status == "done" for i in (async_id, sync_id)),
                       "both jobs to finish")
    finally:
        release.set()
        worker.request_stop()
        assert await running == 0
    job = queue.get(async_id)
    assert job is not None and (job.progress, job.progress_note) == (1.0, "async done")
    app.events.flush()
    reported = {(e.job_id, e.detail["fraction"], e.detail["note"])  # type: ignore[index]
                for e in events}
    assert {(async_id, 0.5, "async half"), (sync_id, 0.25, None)} <= reported
    # A thousand reports within a second were written once or twice, never each.
    assert len([e for e in events if e.job_id == async_id]) <= 3


async def test_a_lost_claim_keeps_no_lines_and_writes_no_progress(app, queue, db):
    """An attempt cancelled while it runs loses its claim: what it logged and reported
    after the last flush is refused with its outcome, fenced by the token."""
    logged = asyncio.Event()

    @app.task(pass_context=True)
    async def cancelled(context: pgbaton.JobContext) -> None:
        log.info("before the cancel")
        logged.set()
        while not context.should_stop:
            await asyncio.sleep(0.02)
        log.info("after the cancel")
        context.progress(0.9, note="too late")

    job_id = cancelled.defer()
    worker = Worker(app, WorkerConfig(lease=1.5, maintenance=False, poll_interval=0.05))
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(logged.wait(), DEADLINE_SECONDS)
        assert queue.cancel(job_id)
        await wait_for(lambda: worker.stats["claims_lost"] == 1, "the claim to be lost")
        await wait_for(lambda: not len(worker.held), "the worker to let go of the job")
    finally:
        worker.request_stop()
        assert await running == 0
    assert lines_of(db) == {}
    row = db.execute("SELECT status, progress, progress_note FROM jobs WHERE id = %s",
                     (job_id,)).fetchone()
    assert row == {"status": "cancelled", "progress": None, "progress_note": None}
