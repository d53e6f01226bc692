"""Claiming ahead sized by the worker (`--claim-ahead auto`,
docs/explanation/architecture.md "Claiming ahead sized by the worker"): real
`pgbaton worker` processes.

A backlog is drained with jobs held ahead; without one nothing is; a SIGKILL gives back
the attempts of the jobs held and not started; a job that kills its worker between its
claim and its start still runs out of attempts (jobs.holds); a cancel reaches a held job
before it starts; a SIGTERM hands back every job not started.

Every handler start and end is a line appended to a file (O_APPEND: a line written is
there after a SIGKILL), and every claim is judged afterwards in SQL. The workers run
without maintenance: the test reaps when it means to."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton.worker import executor
from pgbaton.worker.hand_back import HandBack
from pgbaton.worker.held import HeldJobs, Running
from pgbaton.worker.runner import STOP_RELEASE_SECONDS
from tests.worker_processes import WorkerProcess, scalar, wait_until

AHEAD_SPEC = "tests.worker.processes.test_claim_ahead_auto:app"
SCHEMA = os.environ.get("PGBATON_TEST_SCHEMA", "pgbaton")
app = pgbaton.App(schema=SCHEMA)
# Where handlers append their lines, and the exit status of a worker its poison killed.
LINES_ENV = "PGBATON_TEST_LINES"
POISON_EXIT = 71
# A cancel reaches a job claimed ahead by notification: one committed within this of
# the job's start (the notification's delay, on a loaded test machine) reaches it just
# after its start instead, and stops its handler.
NOTIFICATION_MARGIN = 0.5


def _line(context: pgbaton.JobContext, what: str) -> None:
    path = os.environ.get(LINES_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{context.job_id} {context.attempt} {what} {os.getpid()}"
                         f" {time.time():.6f}\n".encode())
        finally:
            os.close(fd)


@app.task(pass_context=True)
async def work(context: pgbaton.JobContext, seconds: float = 0.0) -> None:
    _line(context, "start")
    if seconds:
        await asyncio.sleep(seconds)
    _line(context, "end")


@app.task(pass_context=True, max_attempts=1)
async def poison(context: pgbaton.JobContext) -> None:
    _line(context, "start")


# The fault: the worker process dies as soon as a claim hands it a `poison` job, before
# the job (or any job of that claim) starts: as a claim's row that cannot be decoded, or
# anything else that ends the process while the job waits in it. Installed only in the
# worker processes (the test's own process never runs Executor.start).
_claims_handed = executor.Executor.start


def _die_on_poison(self: executor.Executor, claims: list[Any], sent_at: float) -> None:
    if any(claim.task == "poison" for claim in claims):
        os._exit(POISON_EXIT)
    _claims_handed(self, claims, sent_at)


if os.environ.get(LINES_ENV):
    executor.Executor.start = _die_on_poison  # type: ignore[method-assign]


@pytest.fixture
def lines_path(tmp_path: Path) -> Path:
    return tmp_path / "lines.txt"


@pytest.fixture
def run_worker(
    start_worker: Callable[..., WorkerProcess], lines_path: Path
) -> Callable[..., WorkerProcess]:
    """`pgbaton worker --claim-ahead auto` processes of this module's App; each killed
    at teardown."""

    def start(*options: str) -> WorkerProcess:
        assert not any(option.startswith("--claim-ahead") for option in options)
        return start_worker("--no-maintenance", "--poll-interval", "0.2",
                            "--claim-ahead", "auto", *options, app_spec=AHEAD_SPEC,
                            env_extra={LINES_ENV: str(lines_path)})

    return start


def _lines(path: Path, what: str) -> Counter[int]:
    """How many `what` lines each job has."""
    if not path.exists():
        return Counter()
    return Counter(int(line.split()[0]) for line in path.read_text().splitlines()
                   if line.split()[2] == what)


def _ran_in(path: Path) -> dict[int, set[int]]:
    """The worker processes each job's handler started in."""
    ran: dict[int, set[int]] = {}
    for line in path.read_text().splitlines():
        job, _, what, pid, _ = line.split()
        if what == "start":
            ran.setdefault(int(job), set()).add(int(pid))
    return ran


def _first_starts(path: Path) -> dict[int, float]:
    """When each job's handler first started, by the wall clock (the test's too)."""
    starts: dict[int, float] = {}
    for line in path.read_text().splitlines():
        job, _, what, _, at = line.split()
        if what == "start":
            starts.setdefault(int(job), float(at))
    return starts


def _cancel_lock_waiters(conn: psycopg.Connection[Any], blocker: int) -> int:
    """Cancels the statements that wait for a lock the session `blocker` (a backend pid)
    holds (SQLSTATE 57014 for them, a passing error); how many there were. Only those:
    another test's statements on a shared server may wait for locks of their own."""
    row = conn.execute("SELECT count(*) FILTER (WHERE pg_cancel_backend(pid))"
                       " FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                       (blocker,)).fetchone()
    assert row is not None
    return int(row[0])


def _enqueue(queue: pgbaton.Queue, count: int, **job: Any) -> list[int]:
    return queue.enqueue_many([{"task": "work", **job} for _ in range(count)])


def _held_not_started(db: psycopg.Connection[Any]) -> int:
    return scalar(db, "SELECT count(*) FROM jobs WHERE status = 'running'"
                      " AND started_at IS NULL")


def _most_held_while(db: psycopg.Connection[Any], done: Callable[[], bool],
                     timeout: float) -> int:
    """The most jobs seen held ahead (running, not started) until done() holds."""
    most, deadline = 0, time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        most = max(most, _held_not_started(db))
        time.sleep(0.01)
    return most


def _done(db: psycopg.Connection[Any]) -> int:
    return scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done'")


def test_a_backlog_is_drained_with_jobs_held_ahead(run_worker, db, queue, lines_path):
    """3,000 no-op jobs at concurrency 32: the worker holds jobs ahead while the
    backlog lasts (seen in SQL, and counted by its starts of jobs claimed ahead), and
    every job runs once on one attempt."""
    jobs = _enqueue(queue, 3000)
    worker = run_worker("--concurrency", "32")
    most = _most_held_while(db, lambda: _done(db) == len(jobs), timeout=120)
    assert worker.stop() == 0
    stats = worker.final_stats()
    assert most > 32, most
    assert stats["started_ahead"] > 500, stats
    # Topped up when half the jobs ahead have started, not one freed slot at a time:
    # claims of a few jobs each cost the worker twice its CPU per job.
    assert stats["claimed"] / stats["claims"] >= 32, stats
    assert _lines(lines_path, "end") == Counter({job: 1 for job in jobs})
    assert scalar(db, "SELECT count(*) FROM jobs WHERE attempts = 1 AND holds = 0"
                      " AND errors = '[]'") == len(jobs)


def test_without_a_backlog_nothing_is_held_ahead(run_worker, db, queue, lines_path):
    """Jobs arriving one at a time, each claimed as it comes: every claim comes back
    short of what it asked, so none is claimed ahead; each starts at its claim."""
    worker = run_worker("--concurrency", "32")
    jobs = []
    for _ in range(40):
        jobs.append(queue.enqueue("work"))
        time.sleep(0.05)
        assert _held_not_started(db) == 0
    wait_until(lambda: _done(db) == len(jobs), what="every job done")
    assert worker.stop() == 0
    assert worker.final_stats().get("started_ahead", 0) == 0
    assert _lines(lines_path, "end") == Counter({job: 1 for job in jobs})


def test_a_killed_worker_gives_back_the_attempts_of_the_jobs_it_held_ahead(
    run_worker, db, queue, lines_path
):
    """SIGKILL a worker of the default while it holds 50 or more jobs with no start
    recorded beyond its running ones (20 ms jobs, two attempts each): jobs waiting
    ahead, and jobs started from them since their claim. Reaped, they are pending with
    no attempt spent, one hold counted and a record saying their start was not recorded;
    a second worker drains everything. Every job ends done, and each run of its handler
    is counted in SQL: as an attempt (one for the run that finished, one for each start
    its record says was spent), or as a hold (a run the kill cut short before its start
    was recorded). Ten or more of them had not started at the kill, and their handlers
    ran exactly once."""
    jobs = _enqueue(queue, 6000, args={"seconds": 0.02}, max_attempts=2)
    worker = run_worker("--concurrency", "32", "--lease", "2")
    # The 32 handlers running have no start recorded either: 50 more than those.
    wait_until(lambda: _held_not_started(db) >= 50 + 32, timeout=60,
               what="50 jobs held ahead")
    worker.kill()
    # A statement of the worker's in flight at the kill still runs on the server and
    # may commit (an outcome that records a job's start: CI saw one such job end done):
    # read what the worker held once the server has let go of all its sessions.
    wait_until(lambda: scalar(db, "SELECT count(*) FROM pg_stat_activity"
                                  " WHERE starts_with(application_name, 'pgbaton worker ')") == 0,
               timeout=30, what="the killed worker's sessions gone")
    held = [r["id"] for r in db.execute(
        "SELECT id FROM jobs WHERE status = 'running' AND started_at IS NULL")]
    assert len(held) >= 10
    wait_until(lambda: queue.reap() >= 0 and scalar(
        db, "SELECT count(*) FROM jobs WHERE status = 'running'") == 0,
        timeout=30, what="the killed worker's leases reaped")
    rows = db.execute("SELECT status, attempts, holds, errors FROM jobs WHERE id = ANY(%s)",
                      (held,)).fetchall()
    assert {(r["status"], r["attempts"], r["holds"]) for r in rows} == {("pending", 0, 1)}
    assert {tuple((e["type"], e["started"]) for e in r["errors"]) for r in rows} == {
        (("LeaseExpired", False),)}
    waited = set(held) - set(_lines(lines_path, "start"))
    assert len(waited) >= 10

    other = run_worker("--concurrency", "32")
    wait_until(lambda: _done(db) == len(jobs), timeout=120, what="every job done")
    assert other.stop() == 0
    ends = _lines(lines_path, "end")
    assert all(ends[job] == 1 for job in waited)
    counted = {r["id"]: (r["attempts"], r["holds"])
               for r in db.execute("SELECT id, attempts, holds FROM jobs")}
    assert all(1 <= ends[job] <= sum(counted[job]) for job in jobs)
    assert all(counted[job][1] == 0 for job in set(jobs) - set(held))
    assert scalar(db, """
        SELECT count(*) FROM jobs
        WHERE attempts <> 1 + (SELECT count(*) FROM jsonb_array_elements(errors) AS e
                               WHERE (e ->> 'started')::boolean)""") == 0
    # At most the jobs whose handlers ran, or ended unwritten, at the kill spent one.
    assert scalar(db, "SELECT count(*) FROM jobs WHERE attempts = 2") <= 2 * 32


def test_a_job_that_kills_its_worker_before_it_starts_runs_out_of_attempts(
    run_worker, db, queue, lines_path
):
    """A job whose claim kills its worker before it starts (one attempt), behind a
    backlog of no-op jobs each round, so a warm worker takes it ahead. Each death
    while it was held gives its attempt back and counts a hold; from its third hold
    the claim starts it at once, so the next death spends its attempt: it ends failed
    after at most 3 + 1 deaths instead of coming back for ever. The no-op jobs held
    beside it each time end done, each run of theirs counted as an attempt or, cut
    short by a death before its start was recorded, a hold."""
    killer = queue.enqueue("poison", priority=-1, max_attempts=1)
    deaths = 0
    for _ in range(8):
        if scalar(db, "SELECT status FROM jobs WHERE id = %s", killer) == "failed":
            break
        _enqueue(queue, 2000)
        worker = run_worker("--concurrency", "16", "--lease", "1")
        wait_until(lambda w=worker: w.process.poll() is not None, timeout=60,
                   what="the worker killed by the poison")
        assert worker.process.returncode == POISON_EXIT, worker.log()
        deaths += 1
        wait_until(lambda: queue.reap() >= 0 and scalar(
            db, "SELECT count(*) FROM jobs WHERE status = 'running'") == 0,
            timeout=30, what="the dead worker's leases reaped")
    row = db.execute("SELECT status, attempts, holds, errors FROM jobs WHERE id = %s",
                     (killer,)).fetchone()
    held = [e["started"] for e in row["errors"]]
    assert (row["status"], row["attempts"]) == ("failed", 1), row
    assert held[-1] is True and held.count(True) == 1, held
    assert len(held) == deaths <= 4
    assert row["holds"] == held.count(False) <= 3
    assert _lines(lines_path, "start")[killer] == 0  # its handler never ran
    # What was left runs once, done.
    other = run_worker("--concurrency", "16")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status <> 'done'") == 1,
               timeout=60, what="the rest done")
    assert other.stop() == 0
    ends = _lines(lines_path, "end")
    counted = {r["id"]: r["attempts"] + r["holds"] for r in db.execute(
        "SELECT id, attempts, holds FROM jobs WHERE status = 'done'")}
    assert all(1 <= ends[job] <= counted[job] for job in counted)


def test_a_job_held_by_workers_that_die_three_times_starts_at_its_claim(db, queue):
    """The holds rule on its own, deterministic: a fresh worker's first claim (no
    backlog measured yet) starts all it takes, so the test counts the holds itself; a
    job with holds 3 is started by the claim even where it stands beyond the free
    slots, and one with holds 2 is not."""
    jobs = [queue.enqueue("work") for _ in range(4)]
    db.execute("UPDATE jobs SET holds = CASE WHEN id = %s THEN 3 ELSE 2 END",
               (jobs[3],))
    claims = queue.claim_batch("w", limit=4, lease=30, starting=1).claims
    assert [c.id for c in claims] == jobs
    assert [c.started for c in claims] == [True, False, False, True]
    holds = {r["id"]: r["holds"] for r in db.execute("SELECT id, holds FROM jobs")}
    assert holds == {jobs[0]: 2, jobs[1]: 3, jobs[2]: 3, jobs[3]: 3}


def test_a_cancel_reaches_a_held_job_before_it_starts(run_worker, db, queue, lines_path):
    """During a default drain of 10 ms jobs, cancel the jobs held with no start recorded
    (waiting in the worker, or started since their claim). A cancel is delivered by
    notification: no handler starts later than NOTIFICATION_MARGIN after its job's
    cancel committed; many cancelled jobs never run; every one is let go (no token)."""
    jobs = _enqueue(queue, 4000, args={"seconds": 0.01})
    worker = run_worker("--concurrency", "32")
    cancelled: dict[int, float] = {}  # job -> when its cancel had committed
    deadline = time.monotonic() + 60
    while len(cancelled) < 100 and time.monotonic() < deadline:
        held = [r["id"] for r in db.execute(
            "SELECT id FROM jobs WHERE status = 'running' AND started_at IS NULL"
            " ORDER BY id DESC LIMIT 20")]
        for job in held:
            if queue.cancel(job):
                cancelled[job] = time.time()
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status IN"
                                  " ('pending', 'running')") == 0,
               timeout=120, what="the drain over")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE claim_token IS NOT NULL")
               == 0, timeout=30, what="every cancelled job let go")
    assert worker.stop() == 0
    starts = _first_starts(lines_path)
    never_started = [job for job in cancelled if job not in starts]
    late = {job: round(starts[job] - at, 4) for job, at in cancelled.items()
            if job in starts and starts[job] > at}
    assert len(never_started) >= 10, (len(never_started), len(cancelled))
    assert all(delay < NOTIFICATION_MARGIN for delay in late.values()), late
    stats = worker.final_stats()
    assert stats["cancels_heard"] >= len(never_started)
    assert stats["claims_lost"] >= len(never_started)
    ends = _lines(lines_path, "end")
    assert all(ends[job] == 1 for job in jobs if job not in cancelled)


def test_a_stopping_worker_hands_back_every_job_it_has_not_started(
    run_worker, db, queue, lines_path
):
    """SIGTERM while 50 or more jobs are held ahead: the worker releases every job it
    has not started, attempts given back, and lets the running ones finish."""
    jobs = _enqueue(queue, 6000, args={"seconds": 0.02})
    worker = run_worker("--concurrency", "32")
    # Running with no start recorded: the 32 handlers running too, whose starts their
    # outcomes record, so 50 more than those.
    wait_until(lambda: _held_not_started(db) >= 50 + 32, timeout=60,
               what="50 jobs held ahead")
    assert worker.stop() == 0
    assert scalar(db, "SELECT count(*) FROM jobs WHERE status = 'running'"
                      " OR claim_token IS NOT NULL") == 0
    assert scalar(db, "SELECT count(*) FROM jobs WHERE status NOT IN ('pending', 'done')"
                  ) == 0
    assert scalar(db, "SELECT count(*) FROM jobs WHERE status = 'pending'"
                      " AND (attempts <> 0 OR holds <> 0 OR errors <> '[]')") == 0
    done = {r["id"] for r in db.execute("SELECT id FROM jobs WHERE status = 'done'")}
    assert _lines(lines_path, "start") == Counter({job: 1 for job in done})
    assert _lines(lines_path, "end") == Counter({job: 1 for job in done})
    assert worker.final_stats()["released"] >= 10
    assert len(done) < len(jobs)


def _one_running_three_held(start_worker, db, queue, lines_path):
    """A `pgbaton worker --claim-ahead 3 --concurrency 1` running one 30 s job and holding
    three ahead: the jobs, the worker, and the first job held ahead. The jobs come once
    the worker listens: a LISTEN session new while it holds jobs beats at once (cancels
    may have gone unheard), and that beat would take the row locks the tests mean for
    their release; the next beat is 10 s away."""
    worker = start_worker("--no-maintenance", "--poll-interval", "0.2", "--claim-ahead",
                          "3", "--concurrency", "1", "--shutdown-grace", "0.2",
                          app_spec=AHEAD_SPEC, env_extra={LINES_ENV: str(lines_path)})
    # LISTEN on its echo channel is the last statement of the session's set-up.
    wait_until(lambda: scalar(db, "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle'"
                                  " AND query LIKE %s", f"%LISTEN %{queue.schema}_echo_%")
               == 1, timeout=30, what="the worker listening")
    jobs = _enqueue(queue, 4, args={"seconds": 30})
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status = 'running'")
               == len(jobs), timeout=30, what="one job running and three held ahead")
    return jobs, worker, scalar(db, "SELECT min(id) FROM jobs WHERE started_at IS NULL")


def test_a_release_at_stop_cut_by_a_passing_error_is_sent_again(
    start_worker, db, queue, dsn, lines_path
):
    """SIGTERM with one job running and three held ahead (`--claim-ahead 3`); the stop's
    release waits for a row lock and is cancelled there (SQLSTATE 57014), a passing
    error. The stopping worker sends it again once the lock is gone, so every job goes
    back to pending, attempts and holds given back, instead of waiting for its lease and
    the reaper, which would count a hold (and, for the started one, an attempt) for a
    death that never happened."""
    jobs, worker, held = _one_running_three_held(start_worker, db, queue, lines_path)
    with psycopg.connect(dsn) as locker:
        locker.execute("SET search_path TO " + queue.schema)
        locker.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (held,))
        worker.process.send_signal(signal.SIGTERM)
        with psycopg.connect(dsn, autocommit=True) as canceller:
            cancelled = 0
            for _ in range(400):  # cancel the release once it waits for the lock
                cancelled = _cancel_lock_waiters(canceller, locker.info.backend_pid)
                if cancelled:
                    break
                time.sleep(0.05)
            assert cancelled == 1
        locker.rollback()
    assert worker.stop() == 0
    assert [tuple(r.values()) for r in db.execute(
        "SELECT status, attempts, holds, claim_token FROM jobs ORDER BY id")] == [
        ("pending", 0, 0, None)] * len(jobs)
    assert worker.final_stats()["released"] == len(jobs)
    assert re.search(r"release of \d jobs failed \(canceling statement", worker.log())
    assert "could not release" not in worker.log()


def test_a_second_stop_cuts_a_release_that_waits(start_worker, db, queue, dsn, lines_path):
    """`pgbaton worker`: the stop's release waits for a row lock that is never let go;
    a second SIGTERM while it waits ends the process within about FORCED_STOP_SECONDS
    (run.py's timer, exit 1), not at the lock's end nor at STOP_RELEASE_SECONDS; the
    jobs it could not release are left to their leases, still running under its token
    (nothing half-written)."""
    _, worker, held = _one_running_three_held(start_worker, db, queue, lines_path)
    with psycopg.connect(dsn) as locker:
        locker.execute("SET search_path TO " + queue.schema)
        locker.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (held,))
        worker.process.send_signal(signal.SIGTERM)
        # Blocked by this locker: another test's waits on a shared server are not it.
        wait_until(lambda: scalar(db, "SELECT count(*) FROM pg_stat_activity WHERE %s"
                                      " = ANY(pg_blocking_pids(pid))",
                                  locker.info.backend_pid) == 1,
                   timeout=30, what="the stop's release waiting for the lock")
        asked = time.monotonic()
        worker.process.send_signal(signal.SIGTERM)
        worker.process.wait(timeout=30)
        took = time.monotonic() - asked
        locker.rollback()
    assert took < STOP_RELEASE_SECONDS / 2, took
    assert "second stop request" in worker.log()
    assert scalar(db, "SELECT count(*) FROM jobs WHERE status = 'running'"
                      " AND claim_token IS NOT NULL") >= 1


def test_jobs_held_past_the_hold_limit_are_handed_back_to_another_worker(
    run_worker, db, queue, lines_path
):
    """No-op jobs make worker A's estimate high; then four 30 s jobs fill its four slots
    while it still claims ahead. The jobs it holds behind them are handed back after
    about a second (HOLD_LIMIT_SECONDS), attempts and holds given back, and worker B
    runs them, each once."""
    _enqueue(queue, 3000, priority=10)
    hung = _enqueue(queue, 4, args={"seconds": 30}, priority=5)
    behind = _enqueue(queue, 200, priority=0)
    first = run_worker("--concurrency", "4", "--shutdown-grace", "1")
    first.wait_for_log("handed back", timeout=60)
    # Started from the jobs ahead, their starts are recorded by an early beat
    # (heartbeat.START_RECORD_SECONDS), long before the heartbeat's (10 s).
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND"
                                  " status = 'running' AND started_at IS NOT NULL", hung)
               == 4, timeout=5, what="the hung jobs' starts recorded")
    second = run_worker("--concurrency", "4")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s)"
                                  " AND status = 'done'", behind) == len(behind),
               timeout=60, what="the jobs behind the hung ones done")
    assert second.stop() == 0
    assert first.stop() == 0
    assert first.final_stats()["handed_back"] >= 1
    ran = _ran_in(lines_path)
    assert all(ran[job] == {second.pid} for job in behind)
    assert _lines(lines_path, "start")[behind[0]] == 1
    assert scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND attempts = 1"
                      " AND holds = 0 AND errors = '[]'", behind) == len(behind)


async def test_a_hand_back_cut_by_a_passing_error_is_sent_again(aqueue, dsn):
    """The hand-back's release fails for a passing reason (here its statement is
    cancelled while it waits for a row lock: SQLSTATE 57014): the hand-back sends it
    again, so the jobs go back to pending at once, attempts and holds given back,
    instead of waiting in no worker for their leases to run out and for the reaper to
    count each a hold their worker never died in (a review found them left so). The
    release is fenced by token: sent twice, it gives back once."""
    for _ in range(3):
        await aqueue.enqueue("work")
    claims = (await aqueue.claim_batch("w", limit=3, lease=30, starting=0)).claims
    assert len(claims) == 3 and not any(c.started for c in claims)
    held = HeldJobs(1)
    runnings = [Running(claim, None, None, 30.0,  # type: ignore[arg-type]
                        deadline=held.now() + 30, held_since=held.now())
                for claim in claims]
    stats: Counter[str] = Counter()
    hand_back = HandBack(aqueue, held, hold_limit=1.0, stopping=asyncio.Event(),
                         stats=stats, notify=lambda *_, **__: None)
    with psycopg.connect(dsn) as locker:
        locker.execute(f'SELECT 1 FROM "{aqueue.schema}".jobs WHERE id = %s FOR UPDATE',
                       (claims[1].id,))
        handing = asyncio.create_task(hand_back.hand_back(runnings))
        with psycopg.connect(dsn, autocommit=True) as canceller:
            cancelled = 0
            for _ in range(200):  # cancel the release once it waits for the lock
                cancelled = _cancel_lock_waiters(canceller, locker.info.backend_pid)
                if cancelled:
                    break
                await asyncio.sleep(0.05)
            assert cancelled == 1
        locker.rollback()
    await asyncio.wait_for(handing, 30)
    assert stats["handed_back"] == 3
    async with await psycopg.AsyncConnection.connect(dsn) as check:
        rows = await (await check.execute(
            f'SELECT status, attempts, holds, claim_token FROM "{aqueue.schema}".jobs'
            " ORDER BY id")).fetchall()
    assert rows == [("pending", 0, 0, None)] * 3
