"""Each run of a job keeps its own log lines (docs/howto/progress-and-logs.md): a run
that gives its attempt back (a snooze, a durable sleep, a release at shutdown) runs
again at the same attempt number, and every run's lines are kept apart, in order,
labelled by attempt and run and by how the run ended. Checked in SQL."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from psycopg.types.json import Jsonb

import pgbaton
from pgbaton import _sql
from pgbaton.limits import MAX_JOB_LOG_BYTES, MAX_JOB_LOG_LINES
from pgbaton.testing import WorkerThread, drain, wait_for_job

log = logging.getLogger("tests.job_logs_runs")
log.setLevel(logging.DEBUG)  # the root logger stays at WARNING in the test process

DEADLINE_SECONDS = 30.0


@pytest.fixture
def app(queue: pgbaton.Queue, dsn: str, schema: str) -> pgbaton.App:
    return pgbaton.App(dsn, schema=schema)


def runs_of(queue: pgbaton.Queue, job_id: int) -> list[tuple[int, int, str | None, list[str]]]:
    """(attempt, run, how it ended, messages) of each run that kept lines, in order."""
    return [(kept.attempt, kept.run, kept.ended, [e["message"] for e in kept.lines])
            for kept in queue.logs(job_id)]


def test_a_job_that_snoozes_twice_keeps_the_lines_of_its_three_runs(app, queue, db):
    """Two snoozes give attempt 1 back twice: the three runs of attempt 1 each keep
    their own lines, in the order they ran, the snoozed ones marked so."""

    runs: list[int] = []

    @app.task
    async def patient() -> str:
        runs.append(len(runs) + 1)
        run = runs[-1]
        log.info("run %d starts", run)
        if run < 3:
            log.warning("run %d snoozes", run)
            raise pgbaton.Snooze(0)
        log.info("run %d ends", run)
        return "ok"

    job_id = patient.defer()
    [result] = drain(app)
    assert (result.status, result.attempts) == ("done", 1)
    assert runs_of(queue, job_id) == [
        (1, 1, "snoozed", ["run 1 starts", "run 1 snoozes"]),
        (1, 2, "snoozed", ["run 2 starts", "run 2 snoozes"]),
        (1, 3, "succeeded", ["run 3 starts", "run 3 ends"]),
    ]
    rows = db.execute("SELECT attempt, token IS NOT NULL AS has_token FROM job_logs"
                      " WHERE job_id = %s ORDER BY run", (job_id,)).fetchall()
    assert [(r["attempt"], r["has_token"]) for r in rows] == [(1, True)] * 3
    assert [m for kept in result.logs for m in (e["message"] for e in kept.lines)] == [
        "run 1 starts", "run 1 snoozes", "run 2 starts", "run 2 snoozes",
        "run 3 starts", "run 3 ends"]


def test_a_durable_sleep_keeps_the_lines_and_progress_of_the_run_before_it(app, queue):
    """A run that ends in ctx.sleep writes its lines and its last progress before the
    job suspends; the run after the wake keeps its own."""

    @app.task(pass_context=True)
    async def napper(context: pgbaton.JobContext) -> None:
        log.info("before the sleep")
        context.progress(0.5, note="half way")
        await context.sleep(0.3)
        log.info("after the sleep")

    job_id = napper.defer()
    with WorkerThread(app, poll_interval=0.05):
        job = wait_for_job(app, job_id, timeout=DEADLINE_SECONDS)
    assert job.status == "done"
    assert runs_of(queue, job_id) == [
        (1, 1, "slept", ["before the sleep"]),
        (1, 2, "succeeded", ["before the sleep", "after the sleep"]),
    ]
    assert (job.progress, job.progress_note) == (0.5, "half way")


def test_a_released_run_keeps_its_lines(app, queue):
    """A worker that stops while a handler runs releases the job (its attempt given
    back): what the run logged is written before the release, and the next run keeps
    its own lines under the same attempt."""
    started = threading.Event()
    runs: list[int] = []

    @app.task(pass_context=True)
    async def long_one(context: pgbaton.JobContext) -> None:
        runs.append(len(runs) + 1)
        log.info("run %d starts", runs[-1])
        context.progress(0.1 * runs[-1], note=f"run {runs[-1]}")
        if runs[-1] == 1:
            started.set()
            while True:  # until the stopping worker cancels it
                await asyncio.sleep(0.02)

    job_id = long_one.defer()
    with WorkerThread(app, poll_interval=0.05, shutdown_grace=0.2):
        assert started.wait(DEADLINE_SECONDS)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts) == ("pending", 0)
    assert (job.progress, job.progress_note) == (pytest.approx(0.1), "run 1")
    assert runs_of(queue, job_id) == [(1, 1, "released", ["run 1 starts"])]
    [result] = drain(app)
    assert (result.status, result.attempts) == ("done", 1)
    assert runs_of(queue, job_id) == [
        (1, 1, "released", ["run 1 starts"]), (1, 2, "succeeded", ["run 2 starts"])]


def line(text: str) -> list[dict[str, str]]:
    return [{"at": "2026-01-01T00:00:00+00:00", "level": "INFO", "logger": "t",
             "message": text}]


def test_a_stale_claim_of_the_same_attempt_writes_no_lines(queue, db):
    """Two runs of one attempt (the first given back): the first run's token, stale
    now, writes nothing beside the second's, alone or in the second's batch; a second
    write of a run changes nothing; bad endings are refused before anything is sent."""
    job_id = queue.enqueue("t")
    [first] = queue.claim("w", tasks=["t"])
    assert queue.write_logs([(first, line("first run"), 0)], ended=["released"]) == [True]
    assert queue.release_many([first]) == [True]
    [second] = queue.claim("w", tasks=["t"])
    assert (first.attempts, second.attempts) == (1, 1) and first.token != second.token
    assert queue.write_logs([(first, line("stale"), 0)]) == [False]
    assert queue.write_logs(
        [(first, line("stale"), 0), (second, line("second run"), 2), (second, line("twice"), 0)],
        ended=[None, "succeeded", "succeeded"]) == [False, True, False]
    assert queue.write_logs([(second, line("again"), 0)]) == [False]
    with pytest.raises(pgbaton.InvalidArgument, match="ending must be one of"):
        queue.write_logs([(second, line("bad"), 0)], ended=["exploded"])
    with pytest.raises(pgbaton.InvalidArgument, match="1 runs and 2 endings"):
        queue.write_logs([(second, line("bad"), 0)], ended=["failed", "failed"])
    assert queue.complete(second)
    assert runs_of(queue, job_id) == [
        (1, 1, "released", ["first run"]), (1, 2, "succeeded", ["second run"])]
    rows = db.execute("SELECT run, token, dropped FROM job_logs WHERE job_id = %s"
                      " ORDER BY run", (job_id,)).fetchall()
    assert [(r["run"], r["token"], r["dropped"]) for r in rows] == [
        (1, first.token, 0), (2, second.token, 2)]
    [kept_first, kept_second] = queue.logs(job_id)
    assert (kept_first.label, kept_second.label) == (
        "attempt 1, run 1 (released)", "attempt 1, run 2 (succeeded)")
    assert kept_second.marker() == (
        f"... 2 more lines not kept (at most {MAX_JOB_LOG_LINES} lines and "
        f"{MAX_JOB_LOG_BYTES} bytes a run)")


def test_each_run_has_bounds_of_its_own(app, queue):
    """Every run keeps at most MAX_JOB_LOG_LINES lines and counts the rest; a run that
    filled its bounds leaves the next run of the same attempt its own."""
    runs: list[int] = []

    @app.task
    async def chatty() -> None:
        runs.append(len(runs) + 1)
        for n in range(MAX_JOB_LOG_LINES + 10 * runs[-1]):
            log.info("run %d line %d", runs[-1], n)
        if runs[-1] < 3:
            raise pgbaton.Snooze(0)

    job_id = chatty.defer()
    [result] = drain(app)
    assert result.status == "done"
    kept = queue.logs(job_id)
    assert [(k.attempt, k.run, k.ended, len(k.lines), k.dropped) for k in kept] == [
        (1, 1, "snoozed", MAX_JOB_LOG_LINES, 10),
        (1, 2, "snoozed", MAX_JOB_LOG_LINES, 20),
        (1, 3, "succeeded", MAX_JOB_LOG_LINES, 30),
    ]
    assert [k.lines[0]["message"] for k in kept] == [f"run {n} line 0" for n in (1, 2, 3)]
    assert all(sum(len(e["message"].encode()) for e in k.lines) <= MAX_JOB_LOG_BYTES
               for k in kept)


def test_lines_kept_before_version_19_read_as_runs_in_attempt_order(dsn, schema, db):
    """A schema at version 18 with one row per attempt migrates: the rows become runs
    1 and 2 in attempt order, with no token and no ending, and the job's next run is
    numbered after them."""
    sql = _sql.queries(schema)
    db.execute(sql["schema_create"])  # type: ignore[arg-type]
    db.execute(sql["schema_version_create"])  # type: ignore[arg-type]
    for migration in _sql.migrations():
        if migration.version > 18:
            break
        db.execute(migration.in_schema(schema))  # type: ignore[arg-type]
        db.execute(sql["schema_version_record"],  # type: ignore[arg-type]
                   {"version": migration.version, "name": migration.name})
    job_id = db.execute("INSERT INTO jobs (task, attempts, max_attempts) VALUES ('t', 3, 5)"
                        " RETURNING id").fetchone()["id"]  # type: ignore[index]
    for attempt in (3, 1):
        db.execute("INSERT INTO job_logs (job_id, attempt, lines, dropped)"
                   " VALUES (%s, %s, %s, %s)",
                   (job_id, attempt, Jsonb(line(f"attempt {attempt}")), attempt))
    db.commit()
    with pgbaton.Queue(dsn, schema=schema) as queue:
        assert queue.migrate() == [m.version for m in _sql.migrations() if m.version > 18]
        assert runs_of(queue, job_id) == [
            (1, 1, None, ["attempt 1"]), (3, 2, None, ["attempt 3"])]
        assert [k.label for k in queue.logs(job_id)] == [
            "attempt 1, run 1", "attempt 3, run 2"]
        [claim] = queue.claim("w", tasks=["t"])
        assert queue.write_logs([(claim, line("attempt 4"), 0)], ended=["failed"]) == [True]
        assert runs_of(queue, job_id)[-1] == (4, 3, "failed", ["attempt 4"])


def test_an_operator_retry_starts_the_attempts_again_and_keeps_every_run(queue):
    """A failed job retried by an operator runs attempt 1 again: its first attempt 1's
    lines stay, and the new one's are kept after them."""
    job_id = queue.enqueue("t", max_attempts=1)
    [first] = queue.claim("w", tasks=["t"])
    assert queue.write_logs([(first, line("before the retry"), 0)], ended=["failed"]) == [True]
    assert queue.fail(first, "boom", retry_in=0)
    assert queue.retry(job_id)
    [again] = queue.claim("w", tasks=["t"])
    assert again.attempts == 1
    assert queue.write_logs([(again, line("after the retry"), 0)],
                            ended=["succeeded"]) == [True]
    assert queue.complete(again)
    assert runs_of(queue, job_id) == [
        (1, 1, "failed", ["before the retry"]), (1, 2, "succeeded", ["after the retry"])]
