"""Each job's own log lines and its progress, at the queue's level: the capture routes
records to their attempt within bounds, the writes are fenced by the claim, bad input
changes nothing, and the logs leave (or stay) with their job whichever way it leaves
jobs (docs/howto/progress-and-logs.md)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import threading

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton import job_logs
from pgbaton.limits import (
    MAX_JOB_LOG_BYTES,
    MAX_JOB_LOG_LINE_CHARS,
    MAX_JOB_LOG_LINES,
    MAX_PROGRESS_NOTE_CHARS,
)
from pgbaton.models import JobLog
from pgbaton.testing import job_context

DAY = 86400.0
HOSTILE = "<script>alert('x')</script> '); DROP TABLE jobs; -- %s {x} \u202e"

log = logging.getLogger("tests.job_logs")
# A record reaches the root logger's handlers only if its logger is enabled for it: the
# root logger is left at WARNING here, as an embedding program may leave it.
log.setLevel(logging.DEBUG)


def line(text: str) -> list[dict[str, str]]:
    return [{"at": "2026-01-01T00:00:00+00:00", "level": "INFO", "logger": "t",
             "message": text}]


def finish_with_logs(queue: pgbaton.Queue, text: str) -> int:
    [claim] = queue.claim("w", tasks=["t"])
    assert queue.write_logs([(claim, line(text), 0)]) == [True]
    assert queue.complete(claim)
    return claim.id


def logged_ids(db: psycopg.Connection[DictRow]) -> list[int]:
    return [r["job_id"] for r in db.execute("SELECT job_id FROM job_logs ORDER BY job_id")]


# -- the capture -------------------------------------------------------------------


def capture_in(level: int = logging.INFO) -> job_logs.AttemptLog:
    """An attempt's log, as the executor begins one in a handler's own context."""
    return job_logs.begin(level)


def test_records_reach_the_attempt_of_their_context_only():
    """Two attempts in two contexts, one of them in a thread (as a sync handler runs),
    log at once: each keeps its own lines; a record outside any keeps nowhere."""
    job_logs.install()
    try:
        logs: dict[str, job_logs.AttemptLog] = {}
        barrier = threading.Barrier(2)

        def attempt(name: str) -> None:
            logs[name] = capture_in()
            barrier.wait()
            for n in range(50):
                log.info("%s line %d", name, n)
            log.debug("below the level: not kept")

        threads = [threading.Thread(target=contextvars.copy_context().run,
                                    args=(attempt, name)) for name in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        log.warning("outside any attempt")
        for name in ("a", "b"):
            taken = logs[name].take()
            assert taken is not None
            lines, dropped = taken
            assert [entry["message"] for entry in lines] == [
                f"{name} line {n}" for n in range(50)]
            assert dropped == 0
            assert {entry["level"] for entry in lines} == {"INFO"}
            assert {entry["logger"] for entry in lines} == {"tests.job_logs"}
        assert job_logs.current() is None
    finally:
        job_logs.uninstall()


async def test_async_tasks_and_their_threads_keep_their_own_lines():
    """Concurrent asyncio tasks, each its own attempt, and a thread one of them starts
    with asyncio.to_thread (which copies the context): no line goes astray."""
    job_logs.install()
    try:
        async def attempt(n: int) -> job_logs.AttemptLog:
            kept = capture_in()
            for step in range(5):
                log.info("job %d step %d", n, step)
                await asyncio.sleep(0)
            await asyncio.to_thread(log.info, "job %d from a thread", n)
            return kept

        kept = await asyncio.gather(*(attempt(n) for n in range(8)))
        for n, attempt_log in enumerate(kept):
            taken = attempt_log.take()
            assert taken is not None
            assert [e["message"] for e in taken[0]] == [
                *(f"job {n} step {s}" for s in range(5)), f"job {n} from a thread"]
    finally:
        job_logs.uninstall()


class Attempt:
    """As the worker's Running carries an attempt's log."""

    def __init__(self, level: int) -> None:
        self.log_level = level
        self.log: job_logs.AttemptLog | None = None


def test_an_attempt_that_logs_nothing_has_no_log():
    """The log of an attempt is made at its first record kept: one that logs nothing,
    or only below its level, has none (a drain's jobs cost no log each); the first
    record made in a sync handler's thread and on the loop at once make one log."""
    job_logs.install()
    try:
        quiet, chatty = Attempt(logging.INFO), Attempt(logging.INFO)
        contextvars.copy_context().run(lambda: (
            job_logs.begin_attempt(quiet), log.debug("below the level")))
        assert quiet.log is None
        barrier = threading.Barrier(8)

        def first_line(n: int) -> None:
            barrier.wait()
            log.info("line %d", n)

        def in_attempt() -> None:
            job_logs.begin_attempt(chatty)
            threads = [threading.Thread(target=contextvars.copy_context().run,
                                        args=(first_line, n)) for n in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        contextvars.copy_context().run(in_attempt)
        assert chatty.log is not None
        taken = chatty.log.take()
        assert taken is not None
        assert sorted(e["message"] for e in taken[0]) == [f"line {n}" for n in range(8)]
    finally:
        job_logs.uninstall()


def test_an_attempt_keeps_its_bounds_and_counts_the_rest():
    """At most MAX_JOB_LOG_LINES lines and MAX_JOB_LOG_BYTES bytes; a long line is cut;
    what does not fit is counted in dropped, and the marker says so."""
    job_logs.install()
    try:
        def many() -> tuple[list[dict[str, str]], int] | None:
            kept = capture_in()
            for n in range(MAX_JOB_LOG_LINES + 25):
                log.info("line %d", n)
            return kept.take()

        taken = contextvars.copy_context().run(many)
        assert taken is not None
        assert len(taken[0]) == MAX_JOB_LOG_LINES and taken[1] == 25

        def large() -> tuple[list[dict[str, str]], int] | None:
            kept = capture_in()
            for _ in range(MAX_JOB_LOG_LINES):
                log.info("x" * (MAX_JOB_LOG_LINE_CHARS * 3))
            return kept.take()

        taken = contextvars.copy_context().run(large)
        assert taken is not None
        lines, dropped = taken
        assert all(len(e["message"]) == MAX_JOB_LOG_LINE_CHARS + len(" [cut]") for e in lines)
        assert sum(len(e["message"].encode()) for e in lines) <= MAX_JOB_LOG_BYTES
        assert len(lines) + dropped == MAX_JOB_LOG_LINES and dropped > 0
        marker = JobLog(1, lines, dropped, None).marker()  # type: ignore[arg-type]
        assert marker is not None and f"{dropped} more lines not kept" in marker
    finally:
        job_logs.uninstall()


def test_text_postgres_cannot_hold_and_broken_records_are_kept_readably():
    """A NUL, a lone surrogate, a format string whose args do not fit, an exception's
    traceback: each becomes a line jsonb holds, none breaks the capture."""
    job_logs.install()
    try:
        def hostile() -> tuple[list[dict[str, str]], int] | None:
            kept = capture_in()
            # Through the capture alone: pytest's own handler raises on the second record,
            # and under xdist a lone surrogate in a captured report kills the worker.
            capture = job_logs.JobLogCapture()
            capture.handle(log.makeRecord(
                log.name, logging.INFO, __file__, 1, "nul \x00 and surrogate \udc80", (), None))
            capture.handle(log.makeRecord(
                log.name, logging.INFO, __file__, 1, "%d is not a number", ("text",), None))
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("it failed")
            return kept.take()

        taken = contextvars.copy_context().run(hostile)
        assert taken is not None
        messages = [e["message"] for e in taken[0]]
        assert messages[0] == "nul \\x00 and surrogate \\udc80"
        assert "could not be formatted" in messages[1]
        assert messages[2].startswith("it failed\nTraceback") and "ValueError: boom" in messages[2]
    finally:
        job_logs.uninstall()


# -- writes fenced by the claim ----------------------------------------------------


def test_logs_are_written_only_by_the_holder_and_once(queue, db):
    """A stale claim's lines are refused; a second write of one attempt changes nothing;
    Queue.logs returns the attempts oldest first, hostile text exactly as logged."""
    job_id = queue.enqueue("t")
    [first] = queue.claim("w", tasks=["t"], lease=30)
    assert queue.write_logs([(first, line(f"one {HOSTILE}"), 0)]) == [True]
    assert queue.write_logs([(first, line("again"), 0)]) == [False]
    assert queue.fail(first, "boom", retry_in=0)
    assert queue.write_logs([(first, line("stale"), 0)]) == [False]  # not running
    [second] = queue.claim("w", tasks=["t"])
    assert queue.write_logs([(second, line("two"), 3), (first, line("stale"), 0)]) == [
        True, False]
    assert queue.complete(second)
    kept = queue.logs(job_id)
    assert [(k.attempt, [e["message"] for e in k.lines], k.dropped) for k in kept] == [
        (1, [f"one {HOSTILE}"], 0), (2, ["two"], 3)]
    assert kept[1].marker() == (
        f"... 3 more lines not kept (at most {MAX_JOB_LOG_LINES} lines and "
        f"{MAX_JOB_LOG_BYTES} bytes a run)")
    assert queue.logs(job_id + 100) == []


def test_progress_is_written_only_by_the_holder(queue, db):
    """write_progress is fenced like the heartbeat and kept when the job ends; Job
    shows it, and marks it stale once a later attempt has started."""
    job_id = queue.enqueue("t", max_attempts=3)
    [claim] = queue.claim("w", tasks=["t"])
    assert queue.write_progress([(claim, 0.25, "a quarter")]) == [True]
    job = queue.get(job_id)
    assert job is not None
    assert (job.progress, job.progress_note, job.progress_stale) == (0.25, "a quarter", False)
    assert queue.fail(claim, "boom", retry_in=0)
    assert queue.write_progress([(claim, 0.5, None)]) == [False]
    job = queue.get(job_id)
    assert job is not None and job.progress == 0.25  # kept at the end of the attempt
    [again] = queue.claim("w", tasks=["t"])
    job = queue.get(job_id)
    assert job is not None and job.progress == 0.25 and job.progress_stale
    assert queue.write_progress([(again, None, "no fraction known")]) == [True]
    job = queue.get(job_id)
    assert job is not None
    assert (job.progress, job.progress_note, job.progress_stale) == (
        None, "no fraction known", False)
    [listed] = queue.jobs(status="running")
    assert listed.progress_note == "no fraction known"


@pytest.mark.parametrize(("fraction", "note", "message"), [
    (1.5, None, "between 0 and 1, got 1.5"),
    (-0.1, None, "between 0 and 1, got -0.1"),
    (math.nan, None, "between 0 and 1, got nan"),
    (math.inf, None, "between 0 and 1, got inf"),
    (True, None, "a number between 0 and 1 or None, got True"),
    ("0.5", None, "a number between 0 and 1 or None, got '0.5'"),
    (0.5, "x" * (MAX_PROGRESS_NOTE_CHARS + 1),
     f"at most {MAX_PROGRESS_NOTE_CHARS} characters, got {MAX_PROGRESS_NOTE_CHARS + 1}"),
    (0.5, 7, "must be a string or None, got 7"),
    (0.5, "nul \x00", "cannot contain a NUL character"),
    (0.5, "\udc80", "not valid Unicode"),
])
def test_bad_progress_is_refused_and_changes_nothing(queue, db, fraction, note, message):
    """Out of range, NaN, not a number, a note too long or not storable: a clear
    InvalidArgument, from ctx.progress and from write_progress alike, nothing written."""
    job_id = queue.enqueue("t")
    [claim] = queue.claim("w", tasks=["t"])
    context = job_context("t", job_id=job_id)
    with pytest.raises(pgbaton.InvalidArgument, match="progress") as refused:
        context.progress(fraction, note)
    assert message in str(refused.value)
    assert context._unwritten_progress() is None
    with pytest.raises(pgbaton.InvalidArgument, match="progress"):
        queue.write_progress([(claim, fraction, note)])
    row = db.execute("SELECT progress, progress_note, progress_at FROM jobs WHERE id = %s",
                     (job_id,)).fetchone()
    assert row == {"progress": None, "progress_note": None, "progress_at": None}


def test_a_note_at_the_limit_and_the_bounds_of_the_fraction_are_accepted(queue):
    job_id = queue.enqueue("t")
    [claim] = queue.claim("w", tasks=["t"])
    note = "é" * MAX_PROGRESS_NOTE_CHARS
    for fraction in (0, 1, 0.0, 1.0):
        assert queue.write_progress([(claim, fraction, note)]) == [True]
    job = queue.get(job_id)
    assert job is not None and job.progress == 1.0 and job.progress_note == note


# -- the logs leave with their job -------------------------------------------------


def test_pruned_and_deleted_jobs_take_their_logs(queue, db):
    """The pruner and an operator's delete (one job, or a filter's) delete the logs of
    the jobs they delete, and of no other job."""
    ids = [queue.enqueue("t") for _ in range(4)]
    for _ in ids:
        finish_with_logs(queue, "kept until the job goes")
    assert logged_ids(db) == ids
    db.execute("UPDATE jobs SET finished_at = now() - interval '2 days' WHERE id = %s",
               (ids[0],))
    assert queue.prune(retention=DAY) == 1
    assert logged_ids(db) == ids[1:]
    assert queue.act("delete", ids[1])
    assert logged_ids(db) == ids[2:]
    db.execute("DELETE FROM jobs WHERE id = %s", (ids[2],))  # any statement
    assert logged_ids(db) == ids[3:]


def test_archived_jobs_keep_their_logs_until_their_partition_or_they_go(queue, db):
    """The history mode's move keeps the logs; they stay readable by Queue.logs; an
    operator's delete of the archived job, and the drop of its partition, delete them."""
    ids = [queue.enqueue("t") for _ in range(3)]
    for n in range(3):
        finish_with_logs(queue, f"archived {n}")
    db.execute("UPDATE jobs SET finished_at = now() - interval '3 days' WHERE id = ANY(%s)",
               (ids[:2],))
    assert queue.archive(after=0, partition=3600) == 3
    assert logged_ids(db) == ids
    assert [e["message"] for e in queue.logs(ids[0])[0].lines] == ["archived 0"]
    assert queue.act("delete", ids[2])
    assert logged_ids(db) == ids[:2]
    assert queue.drop_history(retention=DAY) == 1
    assert logged_ids(db) == []
    assert queue.logs(ids[0]) == []
