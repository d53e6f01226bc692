"""Claiming ahead (WorkerConfig.claim_ahead, `--claim-ahead`): a worker holds up to
concurrency + claim_ahead claims, runs at most `concurrency` handlers at once, starts
the claims it holds in claim order, and hands back the ones it has not started when it
stops, without spending their attempts. Real `pgbaton worker` processes; what they did
is read back from the effects table and the jobs table. The workers run without
maintenance, so that the test app's every-second periodic job takes no slot."""

from __future__ import annotations

import time

import pytest

import pgbaton
from pgbaton import _sql
from tests import app_under_test
from tests.worker_processes import scalar, wait_until


def _held(db) -> int:
    return scalar(db, "SELECT count(*) FROM jobs WHERE task = 'work' AND status = 'running'")


def _most_at_once(db, schema: str) -> int:
    """The most handlers that ran at the same moment, from their start and end rows."""
    return scalar(db, f"""
        WITH spans AS (
            SELECT job_id,
                   min(at) FILTER (WHERE what = 'start') AS started,
                   max(at) FILTER (WHERE what = 'end') AS ended
            FROM "{schema}".effects GROUP BY job_id
        )
        SELECT coalesce(max(n), 0) FROM (
            SELECT (SELECT count(*) FROM spans AS other
                    WHERE other.started <= s.started AND other.ended > s.started) AS n
            FROM spans AS s) AS counts""")


def test_a_worker_holds_more_claims_than_slots_but_runs_only_its_concurrency(
    start_worker, app_schema, db
):
    jobs = [app_under_test.work.enqueue({"seconds": 0.3}) for _ in range(24)]
    worker = start_worker("--concurrency", "2", "--claim-ahead", "6", "--no-maintenance")
    # While the first handlers run, the worker holds 2 running and 6 claimed ahead.
    wait_until(lambda: _held(db) == 8,
               what="eight jobs held")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done'") == 24,
               timeout=60, what="every job done")
    assert worker.stop() == 0
    assert _most_at_once(db, app_schema) == 2
    # Each ran once, and in claim order: a job claimed ahead never overtakes an older one
    # held by the same worker beyond the two that may run side by side.
    starts = [r["job_id"] for r in db.execute(
        f'SELECT job_id FROM "{app_schema}".effects WHERE what = \'start\' ORDER BY at, id')]
    assert sorted(starts) == sorted(jobs)
    assert all(abs(starts.index(job) - i) <= 2 for i, job in enumerate(jobs))


def test_a_stopping_worker_hands_back_what_it_has_not_started_without_spending_attempts(
    start_worker, app_schema, db
):
    slow = [app_under_test.work.enqueue({"seconds": 2.0}) for _ in range(2)]
    waiting = [app_under_test.work.enqueue({"seconds": 2.0}) for _ in range(5)]
    worker = start_worker("--concurrency", "2", "--claim-ahead", "5", "--no-maintenance")
    wait_until(lambda: _held(db) == 7,
               what="seven jobs held")
    wait_until(lambda: scalar(db, f'SELECT count(*) FROM "{app_schema}".effects') >= 2,
               what="the first two handlers started")
    assert worker.stop() == 0
    rows = {r["id"]: r for r in db.execute(
        "SELECT id, status, attempts, claim_token FROM jobs ORDER BY id")}
    # The two that ran finished within the grace; the five that waited are pending again,
    # their attempt given back and their claim token gone.
    assert [rows[j]["status"] for j in slow] == ["done", "done"]
    for job in waiting:
        assert (rows[job]["status"], rows[job]["attempts"], rows[job]["claim_token"]) == (
            "pending", 0, None)
    started = {r["job_id"] for r in db.execute(
        f'SELECT job_id FROM "{app_schema}".effects WHERE what = \'start\'')}
    assert started == set(slow)
    assert worker.final_stats()["released"] == 5


def test_a_job_cancelled_while_it_waits_for_a_slot_is_stopped_and_let_go(
    start_worker, app_schema, db, queue
):
    """A job claimed ahead is held like a running one: a cancel reaches it at once (its
    notification; else at the worker's next heartbeat, every lease / 3), whether it
    still waits or has started by then, and its handler never finishes."""
    first = app_under_test.work.enqueue({"seconds": 2.0})
    behind = app_under_test.work.enqueue({"seconds": 30.0})
    worker = start_worker("--concurrency", "1", "--claim-ahead", "1", "--lease", "3",
                          "--no-maintenance")
    wait_until(lambda: _held(db) == 2, what="both jobs held")
    assert queue.cancel(behind) is True
    wait_until(lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", first) == "done",
               timeout=30, what="the first job done")
    wait_until(lambda: scalar(db, "SELECT claim_token IS NULL FROM jobs WHERE id = %s",
                              behind), timeout=30, what="the cancelled job let go")
    assert worker.stop() == 0
    assert scalar(db, f"""SELECT count(*) FROM "{app_schema}".effects
                          WHERE job_id = %s AND what = 'end'""", behind) == 0
    assert queue.get(behind).status == "cancelled"


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3", "Auto", None])
def test_claim_ahead_is_checked(bad: object) -> None:
    with pytest.raises(pgbaton.InvalidArgument,
                       match=r"claim_ahead must be 'auto' or a whole number >= 0"):
        pgbaton.WorkerConfig(claim_ahead=bad)  # type: ignore[arg-type]


def test_a_killed_worker_gives_back_the_attempts_of_the_jobs_it_had_not_started(
    start_worker, app_schema, db, queue
):
    """SIGKILL a worker holding 2 running and 40 claimed-ahead jobs of one attempt each:
    the 2 that started fail with the lease-expired record, the 40 that waited go back to
    pending with no attempt spent, their record saying they never started; another
    worker then runs them."""
    jobs = [app_under_test.work.enqueue({"seconds": 60.0}, max_attempts=1) for _ in range(42)]
    worker = start_worker("--concurrency", "2", "--claim-ahead", "40", "--lease", "2",
                          "--no-maintenance")
    wait_until(lambda: _held(db) == 42, what="42 jobs held")
    wait_until(lambda: scalar(db, f'SELECT count(*) FROM "{app_schema}".effects') == 2,
               what="the first two handlers started")
    worker.kill()
    wait_until(lambda: queue.reap() >= 0 and _held(db) == 0, timeout=30,
               what="the killed worker's leases reaped")
    started = {r["job_id"] for r in db.execute(
        f'SELECT job_id FROM "{app_schema}".effects WHERE what = \'start\'')}
    assert len(started) == 2
    rows = {r["id"]: r for r in db.execute(
        "SELECT id, status, attempts, started_at, errors FROM jobs WHERE id = ANY(%s)",
        (jobs,))}
    for job in jobs:
        row = rows[job]
        [error] = row["errors"]
        assert error["type"] == "LeaseExpired"
        if job in started:
            assert (row["status"], row["attempts"], error["started"]) == ("failed", 1, True)
        else:
            assert (row["status"], row["attempts"], row["started_at"], error["started"]) == (
                "pending", 0, None, False)
            assert "before the job's start was recorded" in error["message"]
            assert "not counted" in error["message"]
    # The 40 run elsewhere, on their one attempt.
    db.execute("UPDATE jobs SET args = '{\"seconds\": 0}' WHERE status = 'pending'")
    other = start_worker("--concurrency", "4", "--no-maintenance")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done'") == 40,
               timeout=60, what="the 40 done")
    assert scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done' AND attempts = 1"
                  " AND NOT id = ANY(%s)", list(started)) == 40
    assert other.stop() == 0


def test_a_job_that_kills_its_worker_as_it_starts_spends_its_attempts(
    start_worker, app_schema, db, queue
):
    """A handler that os._exit()s its worker, max_attempts=2, first claimed ahead and
    then at once. A death before the start was recorded (started from the jobs ahead)
    counts a hold, one after (started at its claim) an attempt, and from its third hold
    the claim starts it at once: the job ends failed after its two attempts instead of
    coming back for ever, within max_attempts + 3 deaths."""
    first = app_under_test.work.enqueue({"seconds": 0.5})
    killer = app_under_test.kills_its_worker.enqueue()
    workers_started = []
    for _ in range(6):
        if scalar(db, "SELECT status FROM jobs WHERE id = %s", killer) == "failed":
            break
        # One slot and one claimed ahead: on the first round the killer waits behind
        # `first` and starts from the worker's buffer.
        worker = start_worker("--concurrency", "1", "--claim-ahead", "1", "--lease", "1",
                              "--no-maintenance")
        workers_started.append(worker)
        wait_until(lambda w=worker: w.process.poll() is not None, timeout=30,
                   what="the worker killed by its job")
        wait_until(lambda: queue.reap() >= 0 and scalar(
            db, "SELECT count(*) FROM jobs WHERE status = 'running'") == 0,
            timeout=30, what="the dead worker's leases reaped")
    row = db.execute("SELECT status, attempts, holds, errors FROM jobs WHERE id = %s",
                     (killer,)).fetchone()
    assert (row["status"], row["attempts"]) == ("failed", 2)
    started = [e["started"] for e in row["errors"]]
    assert {e["type"] for e in row["errors"]} == {"LeaseExpired"}
    # A death before the start was recorded (the worker heard cancels, so the job
    # started from the jobs ahead with no statement) counts a hold, not an attempt.
    assert started.count(True) == 2, started
    assert row["holds"] == started.count(False) <= 3
    assert len(workers_started) == len(started) <= 2 + 3
    assert scalar(db, "SELECT status FROM jobs WHERE id = %s", first) == "done"
    assert scalar(db, f"""SELECT count(*) FROM "{app_schema}".effects
                          WHERE job_id = %s AND what = 'start'""", killer) == len(started)


def test_a_job_cancelled_while_it_waits_in_the_worker_never_starts(
    start_worker, app_schema, db, queue
):
    """Claim-ahead 3 and a 60 s lease (the heartbeat comes every 20 s): a job cancelled
    while it waits behind a running one is not started when the slot frees; it is let
    go, and its handler never runs."""
    first = app_under_test.work.enqueue({"seconds": 1.5})
    behind = app_under_test.work.enqueue({"seconds": 0})
    worker = start_worker("--concurrency", "1", "--claim-ahead", "3", "--lease", "60",
                          "--no-maintenance")
    wait_until(lambda: _held(db) == 2, what="both jobs held")
    assert queue.cancel(behind) is True
    wait_until(lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", first) == "done",
               timeout=30, what="the first job done")
    wait_until(lambda: scalar(db, "SELECT claim_token IS NULL FROM jobs WHERE id = %s",
                              behind), timeout=10, what="the cancelled job let go")
    assert scalar(db, f"""SELECT count(*) FROM "{app_schema}".effects
                          WHERE job_id = %s""", behind) == 0
    row = db.execute("SELECT status, started_at, holds FROM jobs WHERE id = %s",
                     (behind,)).fetchone()
    # Let go, it gave back the hold its claim counted: its worker did not die.
    assert row == {"status": "cancelled", "started_at": None, "holds": 0}
    stats = worker.stop()
    assert stats == 0
    assert worker.final_stats()["claims_lost"] == 1


def test_a_job_its_claim_started_by_the_holds_rule_is_still_stopped_by_a_cancel(
    start_worker, app_schema, db, queue
):
    """A job held ahead by three workers that died (holds = 3) is started at its claim
    wherever it stands in the batch (the holds rule); when it must still wait for a slot,
    its start is written again when the slot comes, fenced like any job's claimed ahead:
    cancelled while it waited, it never runs (a review found it ran: the claim's start
    was taken as the last word)."""
    first = app_under_test.work.enqueue({"seconds": 1.5})
    behind = app_under_test.work.enqueue({"seconds": 0})
    db.execute("UPDATE jobs SET holds = 3 WHERE id = %s", (behind,))
    worker = start_worker("--concurrency", "1", "--claim-ahead", "3", "--lease", "60",
                          "--no-maintenance")
    wait_until(lambda: _held(db) == 2, what="both jobs held")
    assert scalar(db, "SELECT started_at IS NOT NULL FROM jobs WHERE id = %s", behind)
    assert queue.cancel(behind) is True
    wait_until(lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", first) == "done",
               timeout=30, what="the first job done")
    wait_until(lambda: scalar(db, "SELECT claim_token IS NULL FROM jobs WHERE id = %s",
                              behind), timeout=10, what="the cancelled job let go")
    assert worker.stop() == 0
    assert scalar(db, f"""SELECT count(*) FROM "{app_schema}".effects
                          WHERE job_id = %s""", behind) == 0
    assert queue.get(behind).status == "cancelled"


@pytest.mark.parametrize("flow", [False, True], ids=["plain claim", "flow claim"])
def test_a_claim_records_the_start_of_only_the_jobs_that_start_at_once(
    queue: pgbaton.Queue, db, flow: bool
):
    """claim_batch(starting=2) of 5: the first two in claim order get started_at and
    Claim.started; start_many() starts the others, fenced by token and status, so a job
    cancelled since its claim is refused; a lease that expires on a job never started
    gives its attempt back."""
    if flow:
        queue.set_concurrency("default", 100)  # any limit sends the claim through the flow
    jobs = [queue.enqueue("t", priority=p) for p in (0, 4, 3, 2, 1)]
    claims = queue.claim_batch("w", limit=5, lease=30, starting=2).claims
    assert [c.id for c in claims] == [jobs[1], jobs[2], jobs[3], jobs[4], jobs[0]]
    assert [c.started for c in claims] == [True, True, False, False, False]
    started = {r["id"]: r["started_at"] is not None for r in db.execute(
        "SELECT id, started_at FROM jobs")}
    assert started == {c.id: c.started for c in claims}

    # A job claimed ahead counts a hold; the jobs started at once do not.
    holds = {r["id"]: r["holds"] for r in db.execute("SELECT id, holds FROM jobs")}
    assert holds == {c.id: 0 if c.started else 1 for c in claims}

    assert queue.cancel(claims[3].id) is True
    lease_before = scalar(db, "SELECT lease_until FROM jobs WHERE id = %s", claims[2].id)
    assert queue.start_many(claims[2:4]) == [True, False]
    assert claims[2].started and not claims[3].started
    # The start takes its hold back and leaves the lease to the heartbeat.
    row = db.execute("SELECT started_at, lease_until, holds FROM jobs WHERE id = %s",
                     (claims[2].id,)).fetchone()
    assert row["started_at"] is not None
    assert (row["lease_until"], row["holds"]) == (lease_before, 0)

    db.execute("UPDATE jobs SET lease_until = now() - interval '1 s'"
               " WHERE id = %s", (claims[4].id,))
    assert queue.reap() == 1
    row = db.execute("SELECT status, attempts, started_at, errors FROM jobs WHERE id = %s",
                     (claims[4].id,)).fetchone()
    assert (row["status"], row["attempts"], row["started_at"]) == ("pending", 0, None)
    assert [(e["type"], e["started"], e["attempt"]) for e in row["errors"]] == [
        ("LeaseExpired", False, 1)]
    # Its worker died holding it: the hold stays counted.
    assert scalar(db, "SELECT holds FROM jobs WHERE id = %s", claims[4].id) == 1


def test_a_start_sent_again_takes_back_its_hold_once(queue: pgbaton.Queue, db) -> None:
    """The Starter sends a start again when its answer was lost (the connection dropped
    after the server committed it), and the executor writes again, at its slot, the
    start of a job its claim started by the holds rule. Neither may take back a hold
    that no claim counted: a start takes back its claim's hold only when it is the one
    that starts the job (started_at was unset). A review found each sent start took one
    back, so the deaths counted before were lost."""
    jobs = [queue.enqueue("t") for _ in range(2)]
    # One earlier death for the first; the second was held by three workers that died.
    db.execute("UPDATE jobs SET holds = CASE WHEN id = %s THEN 1 ELSE 3 END", (jobs[0],))
    claims = queue.claim_batch("w", limit=2, lease=30, starting=0).claims
    assert [c.id for c in claims] == jobs
    assert [c.started for c in claims] == [False, True]  # the second by the holds rule
    for _ in range(2):
        assert queue.start_many(claims) == [True, True]
    holds = {r["id"]: r["holds"] for r in db.execute("SELECT id, holds FROM jobs")}
    assert holds == {jobs[0]: 1, jobs[1]: 3}


def test_a_job_cancelled_while_held_ahead_gets_its_hold_back_when_let_go(
    queue: pgbaton.Queue, db
) -> None:
    """A job claimed ahead counts a hold. Cancelled while it waits, it never starts, and
    its worker, alive, lets go of it (job_release_many): that takes the hold back as a
    release does, and only the deaths counted before stay (a review found the claim's
    +1 kept). A job cancelled and retried while still held is due at once when let go,
    with no hold at all (the retry counts afresh)."""
    jobs = [queue.enqueue("t") for _ in range(2)]
    db.execute("UPDATE jobs SET holds = 1")  # one earlier death each
    claims = queue.claim_batch("w", limit=2, lease=30, starting=0).claims
    assert [c.id for c in claims] == jobs and not any(c.started for c in claims)
    assert queue.cancel(jobs[0]) and queue.cancel(jobs[1])
    assert queue.retry(jobs[1])
    assert queue.release_many(claims) == [False, False]  # let go: they were lost
    rows = db.execute("SELECT status, holds, claim_token, run_at <= now() AS due"
                      " FROM jobs ORDER BY id").fetchall()
    assert rows == [{"status": "cancelled", "holds": 1, "claim_token": None, "due": True},
                    {"status": "pending", "holds": 0, "claim_token": None, "due": True}]


@pytest.mark.parametrize("how", ["retry", "retry_matching"])
def test_an_operators_retry_counts_the_holds_of_a_job_afresh(
    queue: pgbaton.Queue, db, how: str
) -> None:
    """An operator's retry (Queue.retry, retry_matching, `pgbaton retry`, the dashboard)
    gives a job a fresh set of attempts, and of holds: a failed job and a cancelled one
    that three workers died holding are claimed ahead again after the retry, not started
    at their claim (a review found the count kept, so a retried job's next death while
    it waited spent an attempt)."""
    failed = queue.enqueue("t", max_attempts=1)
    cancelled = queue.enqueue("t")
    db.execute("UPDATE jobs SET holds = 3")
    claim = queue.claim_batch("w", limit=1, lease=30, starting=0).claims[0]
    assert claim.id == failed and claim.started  # the holds rule
    assert queue.fail(claim, "boom") is True
    assert queue.cancel(cancelled) is True
    if how == "retry":
        assert queue.retry(failed) and queue.retry(cancelled)
    else:
        assert queue.retry_matching(pgbaton.JobFilter(), upto=cancelled) == 2
    rows = db.execute("SELECT status, attempts, holds FROM jobs ORDER BY id").fetchall()
    assert rows == [{"status": "pending", "attempts": 0, "holds": 0}] * 2
    claims = queue.claim_batch("w", limit=2, lease=30, starting=0).claims
    assert [(c.id, c.started) for c in claims] == [(failed, False), (cancelled, False)]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_starting_is_checked(queue: pgbaton.Queue, bad: object) -> None:
    with pytest.raises(pgbaton.InvalidArgument, match="starting must be a whole number"):
        queue.claim_batch("w", limit=5, starting=bad)  # type: ignore[arg-type]


def test_a_start_is_a_hot_update(queue: pgbaton.Queue, db, schema: str) -> None:
    """job_start_many writes no indexed column (started_at and holds only, not
    lease_until), so PostgreSQL updates the row in place (HOT): no new entry in the
    primary key and the lease indexes for every job claimed ahead. Counted in the
    statement's own transaction, whose statistics pg_stat_xact_user_tables shows. Five
    jobs: their rows, claimed and started, fit in one page, as HOT needs."""
    jobs = [queue.enqueue("t") for _ in range(5)]
    claims = queue.claim_batch("w", limit=5, lease=30, starting=0).claims
    assert sorted(c.id for c in claims) == sorted(jobs)
    assert not any(c.started for c in claims)
    start = _sql.queries(schema)["job_start_many"]
    with db.transaction():
        rows = db.execute(start, {"ids": [c.id for c in claims],
                                  "tokens": [c.token for c in claims]}).fetchall()
        counts = db.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
            " WHERE relid = 'jobs'::regclass").fetchone()
    assert len(rows) == 5
    assert counts == {"n_tup_upd": 5, "n_tup_hot_upd": 5}
    assert scalar(db, "SELECT count(*) FROM jobs WHERE started_at IS NOT NULL"
                  " AND holds = 0") == 5


def test_the_heartbeat_keeps_the_leases_of_held_and_started_jobs(
    start_worker, app_schema, db, queue
):
    """The start of a job claimed ahead no longer renews its lease: the heartbeat keeps
    both leases, the waiting job's and the started one's. A 1.5 s lease, a 4 s job and
    one waiting behind it (a fixed claim-ahead of 1, which hands nothing back): reaped
    over and over meanwhile, neither job's lease ever runs out, and both end done on
    their first attempt."""
    first = app_under_test.work.enqueue({"seconds": 4.0})
    behind = app_under_test.work.enqueue({"seconds": 2.0})
    worker = start_worker("--concurrency", "1", "--claim-ahead", "1", "--lease", "1.5",
                          "--no-maintenance")
    wait_until(lambda: _held(db) == 2, what="both jobs held")
    reaped = 0
    while scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done'") < 2:
        reaped += queue.reap()
        time.sleep(0.1)
        assert reaped == 0
    assert worker.stop() == 0
    rows = db.execute("SELECT attempts, errors FROM jobs WHERE id = ANY(%s)",
                      ([first, behind],)).fetchall()
    assert rows == [{"attempts": 1, "errors": []}] * 2
