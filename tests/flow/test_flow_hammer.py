"""Fleet-wide flow control under load: several `pgbaton worker` processes drain limited,
rate-limited and paused queues; the handlers record their start and end times in the
effects table, and the invariants are counted in SQL afterwards."""

from __future__ import annotations

import psycopg

import pgbaton
from pgbaton import _sql
from tests import app_under_test
from tests.worker_processes import scalar, wait_until

DRAIN_TIMEOUT_SECONDS = 120.0

# The most handler intervals (effects 'start' .. 'end' of one attempt) open at one
# instant, among the jobs of one queue: checked at every start, where a maximum is.
MOST_AT_ONCE_BY_HANDLERS = """
WITH spans AS (
    SELECT s.job_id, s.at AS began, e.at AS ended
    FROM effects AS s
    JOIN effects AS e ON e.job_id = s.job_id AND e.attempt = s.attempt AND e.what = 'end'
    JOIN jobs AS j ON j.id = s.job_id
    WHERE s.what = 'start' AND j.queue = %s
)
SELECT coalesce(max((SELECT count(*) FROM spans AS o
                     WHERE o.began <= s.began AND s.began < o.ended)), 0) AS most
FROM spans AS s
"""

# The same from the database's side: claim (started_at) to completion (finished_at),
# which contains the handler's interval.
MOST_AT_ONCE_BY_CLAIMS = """
WITH spans AS (SELECT started_at, finished_at FROM jobs WHERE queue = %s)
SELECT coalesce(max((SELECT count(*) FROM spans AS o
                     WHERE o.started_at <= s.started_at AND s.started_at < o.finished_at)),
                0) AS most
FROM spans AS s
"""

# The most claims in any sliding window (t - period, t] of one queue: a window with
# the most claims ends at a claim, so checking each claim's window is enough.
MOST_STARTS_IN_A_WINDOW = """
WITH starts AS (SELECT started_at FROM jobs WHERE queue = %s)
SELECT max((SELECT count(*) FROM starts AS o
            WHERE o.started_at > s.started_at - make_interval(secs => %s::float8)
              AND o.started_at <= s.started_at)) AS most
FROM starts AS s
"""


def _enqueue(queue_name: str, count: int, seconds: float) -> None:
    app_under_test.app.queue.enqueue_many(
        [{"task": "work", "args": {"seconds": seconds}, "queue": queue_name}] * count
    )


def _drained(db: psycopg.Connection, queue_name: str, count: int) -> None:
    wait_until(
        lambda: scalar(db, "SELECT count(*) FROM jobs WHERE queue = %s AND status = 'done'",
                       queue_name) == count,
        timeout=DRAIN_TIMEOUT_SECONDS, what=f"{count} jobs of {queue_name!r} done",
    )


def test_a_concurrency_limit_holds_across_worker_processes(
    queue: pgbaton.Queue, db, start_worker
):
    """Four worker processes with sixteen slots between them drain a queue limited to
    three: never more than three of its jobs run at once, by the handlers' clocks or the
    database's; the limit is reached; an unlimited queue beside it runs wider."""
    queue.set_concurrency("narrow", 3)
    _enqueue("narrow", 150, 0.0)
    _enqueue("wide", 45, 0.05)
    workers = [start_worker("--concurrency", "4") for _ in range(4)]
    _drained(db, "narrow", 150)
    _drained(db, "wide", 45)
    for worker in workers:
        assert worker.stop() == 0, worker.log()

    assert scalar(db, MOST_AT_ONCE_BY_HANDLERS, "narrow") <= 3
    # A worker claims the room of its finished jobs before their completions commit
    # (claim_batch's `finished`), so the database's rows may overlap by those
    # completions in flight; the handlers never do. The limit was reached.
    assert scalar(db, MOST_AT_ONCE_BY_CLAIMS, "narrow") >= 3
    assert sum(w.final_stats().get("claimed_for_finished", 0) for w in workers) > 0
    assert scalar(db, MOST_AT_ONCE_BY_CLAIMS, "wide") > 3
    assert scalar(db, "SELECT count(*) FROM effects WHERE what = 'start'") == 195


def test_a_rate_limit_is_exact_in_every_sliding_window_and_reached_with_a_backlog(
    queue: pgbaton.Queue, db, start_worker
):
    """80 instant jobs at 20 per 4 s, three workers of eight slots: no window of 4 s
    holds more than 20 claims, and the backlog drains at 90% of the rate or more (the
    workers sleep until the next start is due, they do not poll)."""
    queue.set_rate("metered", "20/4s")
    _enqueue("metered", 80, 0.0)
    workers = [start_worker("--concurrency", "8") for _ in range(3)]
    _drained(db, "metered", 80)
    for worker in workers:
        assert worker.stop() == 0, worker.log()

    assert scalar(db, MOST_STARTS_IN_A_WINDOW, "metered", 4.0) == 20
    # 20 start at once, then each slot again 4 s after it was last used: the last of 80
    # starts ideally 12 s after the first; at 90% of the rate (the 60 starts after the
    # first window at 4.5 per second), within 13.3 s. Each reuse of a slot is late by
    # the time a worker takes to wake and claim (about 0.2 s on a loaded 2-core
    # machine): the window is long so that this stays well inside the margin.
    span = scalar(
        db, "SELECT extract(epoch FROM max(started_at) - min(started_at))::float8"
            " FROM jobs WHERE queue = %s", "metered",
    )
    assert 12.0 <= span <= 60 / 4.5, span
    # The log is pruned as it goes, to the queue's last 20 starts (those of the window
    # among them) before each claim adds its own: it never holds 40, whatever ran.
    assert scalar(db, "SELECT count(*) FROM queue_starts WHERE queue = 'metered'") < 40


def test_a_paused_queue_starts_nothing_until_resumed_and_pausing_midway_stops_claims(
    queue: pgbaton.Queue, db, start_worker
):
    """A queue paused before the workers start gives them nothing while another queue
    drains; resumed, it drains. Paused halfway through a drain, no claim dated after the
    pause takes one of its jobs."""
    queue.pause("held")
    _enqueue("held", 20, 0.0)
    _enqueue("flowing", 20, 0.0)
    workers = [start_worker("--concurrency", "4") for _ in range(2)]
    _drained(db, "flowing", 20)
    assert scalar(db, "SELECT count(*) FROM jobs WHERE queue = 'held' AND status <> 'pending'") == 0
    assert scalar(db, "SELECT count(*) FROM effects AS e JOIN jobs AS j ON j.id = e.job_id"
                      " WHERE j.queue = 'held'") == 0

    queue.resume("held")
    _drained(db, "held", 20)

    _enqueue("midway", 400, 0.01)
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE queue = 'midway'"
                                  " AND status = 'done'") >= 20, timeout=DRAIN_TIMEOUT_SECONDS)
    queue.pause("midway")
    paused_at = scalar(db, "SELECT now()")
    # pause() returns once every flow claim that began before it has committed (they
    # hold the flow lock). The workers claim by the plain claim while no queue is paused
    # or limited, which takes no lock and is dated at its start: one that began before
    # the pause may commit after pause() returns, with jobs of the queue (seen in CI on
    # a loaded machine: six jobs, claimed ahead by such a claim, started after the
    # pause). So the claims that began before the pause are waited for; what is not
    # claimed then is never claimed while paused. A job claimed ahead before the pause
    # (the workers' default) may start after it, as it runs to its end.
    plain_claims = [_sql.queries(queue.schema)[name][:60]
                    for name in ("job_claim_many", "job_claim_queues")]
    wait_until(lambda: scalar(
        db, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
            " AND xact_start <= %s AND left(query, 60) = ANY(%s)",
        paused_at, plain_claims) == 0, timeout=DRAIN_TIMEOUT_SECONDS,
        what="the plain claims that began before the pause")
    claimed = {r["id"] for r in db.execute(
        "SELECT id FROM jobs WHERE queue = 'midway' AND status <> 'pending'")}
    # Whatever was claimed before the pause finishes; then the queue stands still.
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE queue = 'midway'"
                                  " AND status = 'running'") == 0, timeout=DRAIN_TIMEOUT_SECONDS)
    done = scalar(db, "SELECT count(*) FROM jobs WHERE queue = 'midway' AND status = 'done'")
    assert done < 400
    started_after = {r["id"] for r in db.execute(
        "SELECT id FROM jobs WHERE queue = 'midway' AND started_at > %s", (paused_at,))}
    assert started_after <= claimed
    # None claimed since (one handed back would be pending again: fewer, never more).
    assert scalar(db, "SELECT count(*) FROM jobs WHERE queue = 'midway'"
                      " AND status <> 'pending'") <= len(claimed)
    queue.resume("midway")
    _drained(db, "midway", 400)
    for worker in workers:
        assert worker.stop() == 0, worker.log()


def test_a_limit_set_while_workers_run_takes_effect_without_a_restart(
    queue: pgbaton.Queue, db, start_worker
):
    """Workers started with no flow control switch to the flow claim when a limit is set
    at run time: every claim dated after the limit keeps within it."""
    workers = [start_worker("--concurrency", "4") for _ in range(2)]
    queue.set_concurrency("late", 2)
    limited_at = scalar(db, "SELECT now()")
    _enqueue("late", 30, 0.03)
    _drained(db, "late", 30)
    for worker in workers:
        assert worker.stop() == 0, worker.log()
    assert scalar(db, "SELECT count(*) FROM jobs WHERE queue = 'late'"
                      " AND started_at <= %s", limited_at) == 0
    assert scalar(db, MOST_AT_ONCE_BY_HANDLERS, "late") <= 2
    assert scalar(db, MOST_AT_ONCE_BY_CLAIMS, "late") >= 2


MOST_AT_ONCE_PER_LIMIT_KEY = """
WITH spans AS (SELECT limit_key, started_at, finished_at FROM jobs WHERE queue = %s)
SELECT coalesce(max((SELECT count(*) FROM spans AS o
                     WHERE o.limit_key = s.limit_key
                       AND o.started_at <= s.started_at AND s.started_at < o.finished_at)),
                0) AS most
FROM spans AS s
"""

MOST_AT_ONCE_PER_LIMIT_KEY_BY_HANDLERS = """
WITH spans AS (
    SELECT j.limit_key, s.at AS began, e.at AS ended
    FROM effects AS s
    JOIN effects AS e ON e.job_id = s.job_id AND e.attempt = s.attempt AND e.what = 'end'
    JOIN jobs AS j ON j.id = s.job_id
    WHERE s.what = 'start' AND j.queue = %s
)
SELECT coalesce(max((SELECT count(*) FROM spans AS o
                     WHERE o.limit_key = s.limit_key
                       AND o.began <= s.began AND s.began < o.ended)), 0) AS most
FROM spans AS s
"""


def test_a_per_key_limit_holds_for_every_limit_key_across_processes(
    queue: pgbaton.Queue, db, start_worker
):
    """Three keys of 30 jobs each, at most two per key at once, three workers of eight
    slots (each claim could take many of one key): no key ever has more than two
    running, the limit is reached, and the queue as a whole runs wider than two."""
    queue.set_key_concurrency("tenants", 2)
    app_under_test.app.queue.enqueue_many([
        {"task": "work", "args": {"seconds": 0.02}, "queue": "tenants",
         "limit_key": f"tenant-{n % 3}"}
        for n in range(90)
    ])
    workers = [start_worker("--concurrency", "8") for _ in range(3)]
    _drained(db, "tenants", 90)
    for worker in workers:
        assert worker.stop() == 0, worker.log()
    assert scalar(db, MOST_AT_ONCE_PER_LIMIT_KEY_BY_HANDLERS, "tenants") <= 2
    # The database's rows may overlap by the finished jobs whose room was claimed
    # before their completions committed; the limit was reached.
    assert scalar(db, MOST_AT_ONCE_PER_LIMIT_KEY, "tenants") >= 2
    assert scalar(db, MOST_AT_ONCE_BY_CLAIMS, "tenants") > 2
