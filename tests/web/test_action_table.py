"""The table of operator actions (pgbaton.actions) is what the SQL does: for every
action and every state, the statements' guards, the Python API and the dashboard
change a job exactly when the table lists its state, as SQL shows afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow
from starlette.testclient import TestClient

import pgbaton
from pgbaton import _sql
from pgbaton.actions import ACTIONS, Action
from pgbaton.models import STATUSES

from .conftest import csrf_token

PRIORITY = 7


def make_job(queue: pgbaton.Queue, status: str, task: str) -> int:
    """A job of its own task and queue in `status`, held by nobody but its running
    worker, and (when pending) scheduled for later: every condition of a guard beyond
    the state holds, so only the state decides."""
    name = f"q-{task}"
    if status == "pending":
        return queue.enqueue(task, queue=name, delay=3600)
    if status == "waiting":
        parent = queue.enqueue(f"{task}-parent", queue=name, delay=3600)
        return queue.enqueue(task, queue=name, after=[parent])
    if status == "cancelled":
        job_id = queue.enqueue(task, queue=name)
        assert queue.cancel(job_id)
        return job_id
    job_id = queue.enqueue(task, queue=name, max_attempts=1)
    (claim,) = queue.claim("w", queues=[name], lease=600)
    assert claim.id == job_id
    if status == "done":
        assert queue.complete(claim)
    elif status == "failed":
        assert queue.fail(claim, RuntimeError("no"))
    return job_id


def snapshot(db: psycopg.Connection[DictRow], job_id: int) -> dict[str, Any] | None:
    return db.execute("SELECT status, run_at, priority, claim_token FROM jobs WHERE id = %s",
                      [job_id]).fetchone()


def is_changed(db: psycopg.Connection[DictRow], job_id: int, task: str,
               apply: Callable[[int, str], object]) -> bool:
    before = snapshot(db, job_id)
    assert before is not None
    apply(job_id, task)
    return snapshot(db, job_id) != before


def ways(action: Action, queue: pgbaton.Queue, db: psycopg.Connection[DictRow],
         client: TestClient, schema: str) -> dict[str, Callable[[int, str], object]]:
    """Every way to apply the action to one job (by id or by a filter naming only its
    task): the statements run bare, the API, and the dashboard's single and bulk forms."""
    sql = _sql.queries(schema)
    token = csrf_token(client)
    priority = {"priority": PRIORITY} if action.takes_priority else {}
    channel = {"channel": queue.channel} if action.wakes else {}

    def statement_one(job_id: int, task: str) -> object:
        return db.execute(sql[action.one], {"id": job_id, **priority, **channel})

    def statement_matching(job_id: int, task: str) -> object:
        params = pgbaton.JobFilter(task=task).params()
        return db.execute(sql[action.matching],
                          {**params, "upto": job_id, **priority, **channel})

    def api_one(job_id: int, task: str) -> object:
        return queue.act(action.name, job_id, **priority)

    def api_matching(job_id: int, task: str) -> object:
        job_filter = pgbaton.JobFilter(task=task)
        # count_matching counts by the table's states alone.
        counted = snapshot(db, job_id)["status"] in action.statuses
        assert queue.count_matching(action.name, job_filter) == (
            (1, job_id) if counted else (0, 0))
        return queue.act_matching(action.name, job_filter, upto=job_id, **priority)

    def dashboard_one(job_id: int, task: str) -> object:
        answer = client.post(f"/jobs/{job_id}/{action.word}",
                             data={"csrf_token": token, "priority": str(PRIORITY)},
                             follow_redirects=False)
        assert answer.status_code in (303, 409), answer.text
        if answer.status_code == 409:
            assert action.refusal in answer.text
        return answer

    def dashboard_bulk(job_id: int, task: str) -> object:
        answer = client.post("/jobs/bulk", data={
            "csrf_token": token, "action": action.word, "task": task, "upto": str(job_id),
            "priority": str(PRIORITY)})
        assert answer.status_code == 200, answer.text
        return answer

    return {"statement one": statement_one, "statement matching": statement_matching,
            "API one": api_one, "API matching": api_matching,
            "dashboard one": dashboard_one, "dashboard bulk": dashboard_bulk}


@pytest.mark.parametrize("action", ACTIONS, ids=[a.name for a in ACTIONS])
def test_every_way_acts_on_the_states_the_table_lists(
        action: Action, queue: pgbaton.Queue, db: psycopg.Connection[DictRow],
        client: TestClient, schema: str) -> None:
    """Each way changes the job when, and only when, its state is in action.statuses."""
    seen: dict[tuple[str, str], bool] = {}
    for way, apply in ways(action, queue, db, client, schema).items():
        for status in STATUSES:
            task = f"t-{uuid.uuid4().hex[:12]}"
            job_id = make_job(queue, status, task)
            assert snapshot(db, job_id)["status"] == status
            seen[way, status] = is_changed(db, job_id, task, apply)
    expected = {(way, status): status in action.statuses for way, status in seen}
    assert seen == expected
