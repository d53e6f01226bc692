"""A soak of 10,000 jobs in which handlers misbehave every way they can, while every
statement of the workers runs under a low statement_timeout and the jobs table is locked
twice for longer than that. It ends with every job done or failed with a readable error,
none running, no two attempts of one job at once, and the workers still claiming."""

from __future__ import annotations

import time
import uuid

import psycopg
import psycopg.conninfo
import pytest

from tests import app_under_test as tasks
from tests.worker.processes.test_hostile import overlapping_attempts
from tests.worker_processes import scalar, wait_until

HOSTILE = {
    "returns_a_set": [{"kind": "set"}, {"kind": "object"}],
    "fails_with_bad_policy": [{}],
    "sync_exits": [{"code": 2}],
    "async_exits": [{"how": "exit"}, {"how": "interrupt"}, {"how": "cancelled"}],
    "blocks_loop": [{"seconds": 0.05}],
    "ignores_stop": [{"seconds": 0.5}],
    "short_lease": [{"seconds": 0.05}],
    "always_fails": [{"n": 1}],
    "long_async": [{"seconds": 0.2}],
}
PER_HOSTILE_TASK = 150
TOTAL = 10_000


@pytest.fixture
def timeout_role(dsn, db):
    """A role whose every statement is cancelled after 250 ms."""
    name = f"pgbaton_soak_{uuid.uuid4().hex[:8]}"
    db.execute(f'CREATE ROLE "{name}" LOGIN SUPERUSER')
    db.execute(f"ALTER ROLE \"{name}\" SET statement_timeout = '250ms'")
    yield psycopg.conninfo.make_conninfo(dsn, user=name)
    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
    )
    for _ in range(50):
        if not scalar(db, "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", name):
            break
        time.sleep(0.1)
    db.execute(f'DROP ROLE "{name}"')


@pytest.mark.slow
def test_soak_of_hostile_handlers_under_cancelled_statements_and_locks(  # noqa: PLR0917
    start_worker, db, app_schema, dsn, timeout_role, queue
):
    jobs = [
        {"task": task, "args": args}
        for task, variants in HOSTILE.items()
        for n in range(PER_HOSTILE_TASK)
        for args in [variants[n % len(variants)]]
    ]
    jobs += [{"task": "noop"}] * (TOTAL - len(jobs))
    ids = queue.enqueue_many(jobs)
    assert len(ids) == TOTAL
    common = ("--lease", "2", "--concurrency", "8", "--poll-interval", "0.2",
              "--shutdown-grace", "5")
    env = {"PGBATON_EFFECTS_DSN": dsn}
    workers = [
        start_worker(*common, dsn_override=timeout_role, env_extra=env),
        start_worker(*common, dsn_override=timeout_role, env_extra=env),
    ]
    with psycopg.connect(dsn) as locker:
        for _ in range(2):
            wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status IN"
                                      " ('done', 'failed')") > 1000, 60, "the soak under way")
            locker.execute(f'LOCK TABLE "{app_schema}".jobs IN ACCESS EXCLUSIVE MODE')
            time.sleep(1.0)  # four times the statement timeout
            locker.rollback()
            time.sleep(1.0)

    def unsettled() -> int:
        return scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status IN"
                      " ('pending', 'running')", ids)

    wait_until(lambda: unsettled() == 0, 240, "every soak job done or failed")
    for worker in workers:
        assert worker.process.poll() is None, worker.log()[-5000:]
    by_status = {r["status"]: r["n"] for r in db.execute(
        "SELECT status, count(*) AS n FROM jobs WHERE id = ANY(%s) GROUP BY 1", (ids,))}
    assert set(by_status) <= {"done", "failed"}, by_status
    assert by_status["done"] >= TOTAL - len(HOSTILE) * PER_HOSTILE_TASK
    unreadable = db.execute(
        "SELECT id, task, errors FROM jobs WHERE id = ANY(%s) AND status = 'failed' AND NOT"
        " (jsonb_array_length(errors) > 0 AND errors -> -1 ->> 'message' <> ''"
        "  AND errors -> -1 ->> 'type' <> '')", (ids,)
    ).fetchall()
    assert unreadable == []
    expected_failures = {"returns_a_set", "sync_exits", "async_exits", "ignores_stop",
                         "always_fails", "fails_with_bad_policy"}
    failed_tasks = {r["task"] for r in db.execute(
        "SELECT DISTINCT task FROM jobs WHERE id = ANY(%s) AND status = 'failed'", (ids,))}
    assert failed_tasks <= expected_failures, failed_tasks
    assert overlapping_attempts(db) == []
    probe = tasks.noop.enqueue()
    wait_until(lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", probe) == "done",
               30, "the workers still claim")
    assert any("canceling statement" in w.log() for w in workers)
    for worker in workers:
        assert worker.stop(60) == 0
