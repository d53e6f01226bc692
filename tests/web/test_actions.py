"""Actions on one job and on a filter: guarded in SQL, confirmed, refused without CSRF,
refused when read-only, and logged with who did them."""

from __future__ import annotations

import base64
import logging

import psycopg
import pytest
from psycopg.rows import DictRow
from starlette.requests import Request
from starlette.testclient import TestClient

import pgbaton
from pgbaton.web import create_app

from .conftest import Jobs, csrf_token


def status_of(db: psycopg.Connection[DictRow], job_id: int) -> str | None:
    row = db.execute("SELECT status FROM jobs WHERE id = %s", [job_id]).fetchone()
    return None if row is None else str(row["status"])


def test_single_actions_change_the_row_and_redirect(
        client: TestClient, jobs: Jobs, db: psycopg.Connection[DictRow],
        caplog: pytest.LogCaptureFixture) -> None:
    """Retry, cancel, run now, priority and delete each move one row, as SQL shows."""
    token = csrf_token(client)
    caplog.set_level(logging.INFO, logger="pgbaton.web")
    answer = client.post(f"/jobs/{jobs.failed}/retry", data={"csrf_token": token},
                         follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].endswith("?done=retry")
    assert status_of(db, jobs.failed) == "pending"
    assert any("anonymous@testclient retry job" in r.getMessage() for r in caplog.records)
    client.post(f"/jobs/{jobs.running}/cancel", data={"csrf_token": token})
    row = db.execute("SELECT status, claim_token FROM jobs WHERE id = %s",
                     [jobs.running]).fetchone()
    # Cancelled, and still held by its running handler's token until that handler lets
    # go or its lease ends (docs/explanation/guarantees.md): its key stays taken meanwhile.
    assert row["status"] == "cancelled" and row["claim_token"] is not None
    client.post(f"/jobs/{jobs.scheduled}/run-now", data={"csrf_token": token})
    due = db.execute("SELECT run_at <= now() AS due FROM jobs WHERE id = %s",
                     [jobs.scheduled]).fetchone()
    assert due == {"due": True}
    client.post(f"/jobs/{jobs.pending}/priority", data={"csrf_token": token, "priority": "9"})
    priority = db.execute("SELECT priority FROM jobs WHERE id = %s", [jobs.pending]).fetchone()
    assert priority == {"priority": 9}
    client.post(f"/jobs/{jobs.done}/delete", data={"csrf_token": token})
    assert status_of(db, jobs.done) is None


def test_an_action_the_state_forbids_is_a_409_and_changes_nothing(
        client: TestClient, jobs: Jobs, db: psycopg.Connection[DictRow]) -> None:
    """Retrying a done job, deleting a running one: refused by the statement's guard."""
    token = csrf_token(client)
    answer = client.post(f"/jobs/{jobs.done}/retry", data={"csrf_token": token})
    assert answer.status_code == 409 and "only a failed or cancelled job" in answer.text
    answer = client.post(f"/jobs/{jobs.running}/delete", data={"csrf_token": token})
    assert answer.status_code == 409 and "cancel it first" in answer.text
    assert status_of(db, jobs.running) == "running" and status_of(db, jobs.done) == "done"
    answer = client.post(f"/jobs/{jobs.pending}/priority",
                         data={"csrf_token": token, "priority": "high"})
    assert answer.status_code == 400 and "priority='high'" in answer.text
    answer = client.post("/jobs/424242/retry", data={"csrf_token": token})
    assert answer.status_code == 404
    assert client.post(f"/jobs/{jobs.failed}/explode",
                       data={"csrf_token": token}).status_code == 400


def test_an_action_without_the_csrf_token_is_refused(
        client: TestClient, jobs: Jobs, db: psycopg.Connection[DictRow]) -> None:
    """No token, a wrong one, or a forged session cookie: 403, nothing written."""
    real = csrf_token(client)
    session = client.cookies["pgbaton_session"]
    for form, cookie in (({}, session), ({"csrf_token": "nope"}, session),
                         ({"csrf_token": real}, "x" * 43), ({"csrf_token": real}, "")):
        client.cookies.clear()  # the jar would send the real one beside it
        client.cookies.set("pgbaton_session", cookie)
        answer = client.post(f"/jobs/{jobs.failed}/retry", data=form)
        assert answer.status_code == 403 and "CSRF" in answer.text
    assert status_of(db, jobs.failed) == "failed"


def test_read_only_shows_pages_and_refuses_actions(
        dsn: str, schema: str, jobs: Jobs, db: psycopg.Connection[DictRow]) -> None:
    """read_only=True: pages render without action buttons; a POST is 403."""
    with TestClient(create_app(dsn, schema=schema, read_only=True)) as client:
        page = client.get(f"/jobs/{jobs.failed}", headers={"Accept": "text/html"})
        assert page.status_code == 200 and 'id="action-retry"' not in page.text
        token = csrf_token(client)
        answer = client.post(f"/jobs/{jobs.failed}/retry", data={"csrf_token": token})
        assert answer.status_code == 403 and "read-only" in answer.text
    assert status_of(db, jobs.failed) == "failed"


def test_token_and_basic_auth(dsn: str, schema: str, jobs: Jobs,
                              db: psycopg.Connection[DictRow]) -> None:
    """Without credentials: 401 with a challenge; the bearer token may act without a
    CSRF token (browsers never send it by themselves); basic auth may not."""
    dashboard = create_app(dsn, schema=schema, token="s3cret-token-of-20ch",
                           basic_auth=("ops", "hunter2"))
    with TestClient(dashboard) as client:
        refused = client.get("/jobs")
        assert refused.status_code == 401 and "Basic" in refused.headers["www-authenticate"]
        assert client.get("/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        bearer = {"Authorization": "Bearer s3cret-token-of-20ch"}
        assert client.post(f"/jobs/{jobs.failed}/retry", headers=bearer,
                           follow_redirects=False).status_code == 303
        assert status_of(db, jobs.failed) == "pending"
        basic = {"Authorization": "Basic " + base64.b64encode(b"ops:hunter2").decode()}
        assert client.get("/jobs", headers=basic).status_code == 200
        answer = client.post(f"/jobs/{jobs.cancelled}/retry", headers=basic)
        assert answer.status_code == 403 and "CSRF" in answer.text
        assert client.get("/healthz").status_code == 200  # load balancers need no login


def test_a_resolver_decides_access(dsn: str, schema: str, jobs: Jobs) -> None:
    """A mounting app's resolver returns full, read-only or forbidden per request."""

    async def resolver(request: Request) -> str:
        return {"admin": "full", "viewer": "read-only"}.get(
            request.headers.get("x-user", ""), "forbidden")

    with TestClient(create_app(dsn, schema=schema, resolver=resolver)) as client:  # type: ignore[arg-type]
        assert client.get("/jobs").status_code == 403
        assert client.get("/jobs", headers={"x-user": "viewer"}).status_code == 200
        token = csrf_token_as(client, "viewer")
        answer = client.post(f"/jobs/{jobs.failed}/retry", data={"csrf_token": token},
                             headers={"x-user": "viewer"})
        assert answer.status_code == 403
        answer = client.post(f"/jobs/{jobs.failed}/retry", data={"csrf_token": token},
                             headers={"x-user": "admin"}, follow_redirects=False)
        assert answer.status_code == 303


def csrf_token_as(client: TestClient, user: str) -> str:
    return csrf_token(client, **{"x-user": user})


def test_the_dashboard_mounts_under_a_prefix(dsn: str, schema: str, jobs: Jobs) -> None:
    """Mounted at /ops/queue in another Starlette app, its links follow the mount."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    host = Starlette(routes=[Mount("/ops/queue", app=create_app(dsn, schema=schema))])
    with TestClient(host) as client:
        page = client.get("/ops/queue/jobs", headers={"Accept": "text/html"})
        assert page.status_code == 200
        assert f'href="/ops/queue/jobs/{jobs.failed}"' in page.text
        assert client.get("/ops/queue/static/dashboard.js").status_code == 200


def test_bulk_retry_counts_first_and_touches_only_what_was_counted(
        client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """The preview counts the failed jobs of a task; a job that fails after the count
    is left alone by the confirmed action."""
    failed = []
    for n in range(3):
        failed.append(queue.enqueue("charge", {"n": n}, max_attempts=1))
    queue.enqueue("other", {}, max_attempts=1)
    for claim in queue.claim("w", limit=10):
        queue.fail(claim, "boom")
    preview = client.get("/jobs/bulk", params={"action": "retry", "status": "failed",
                                               "task": "charge"},
                         headers={"Accept": "text/html"})
    assert preview.status_code == 200 and "3 jobs would change now" in preview.text
    late = queue.enqueue("charge", {"n": 99}, max_attempts=1)
    (claim,) = queue.claim("w")
    queue.fail(claim, "boom")
    token = csrf_token(client)
    answer = client.post("/jobs/bulk", data={
        "csrf_token": token, "action": "retry", "status": "failed", "task": "charge",
        "upto": str(max(failed)),
    })
    assert answer.status_code == 200 and "3 jobs changed" in answer.text
    rows = db.execute("SELECT task, status, count(*) AS n FROM jobs GROUP BY 1, 2 ORDER BY 1, 2")
    assert rows.fetchall() == [
        {"task": "charge", "status": "failed", "n": 1},
        {"task": "charge", "status": "pending", "n": 3},
        {"task": "other", "status": "failed", "n": 1},
    ]
    assert status_of(db, late) == "failed"


def test_bulk_priority_and_cancel(client: TestClient, jobs: Jobs,
                                  db: psycopg.Connection[DictRow]) -> None:
    """Bulk forms of priority and cancel on a queue."""
    token = csrf_token(client)
    upto = jobs.hostile
    client.post("/jobs/bulk", data={"csrf_token": token, "action": "priority",
                                    "queue": "reports", "priority": "5", "upto": str(upto)})
    rows = db.execute("SELECT DISTINCT priority FROM jobs WHERE queue = 'reports'").fetchall()
    assert rows == [{"priority": 5}]
    answer = client.post("/jobs/bulk", data={"csrf_token": token, "action": "cancel",
                                             "queue": "reports", "upto": str(upto)})
    assert "2 jobs changed" in answer.text
    answer = client.post("/jobs/bulk", data={"csrf_token": token, "action": "cancel",
                                             "queue": "reports"})
    assert answer.status_code == 400 and "upto" in answer.text


def test_a_queue_is_paused_and_resumed_from_the_queues_page(
        client: TestClient, queue: pgbaton.Queue, dsn: str, schema: str,
        db: psycopg.Connection[DictRow]) -> None:
    """The queues page shows each queue's settings with a pause or resume button; the
    POST needs the CSRF token, changes the queues table, and read-only refuses it."""
    queue.enqueue("t", queue="reports")
    queue.set_concurrency("reports", 4)
    page = client.get("/queues").text
    assert ">4<" in page and 'action="/queues/pause"' in page
    refused = client.post("/queues/pause", data={"queue": "reports"})
    assert refused.status_code == 403
    assert db.execute("SELECT count(*) AS n FROM queues WHERE paused").fetchone() == {"n": 0}
    token = csrf_token(client, "/queues")
    answer = client.post("/queues/pause", data={"csrf_token": token, "queue": "reports"},
                         follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].endswith("?done=pause")
    assert db.execute("SELECT paused FROM queues WHERE name = 'reports'").fetchone() == {
        "paused": True}
    page = client.get("/queues?done=pause").text
    assert "Paused:" in page and 'action="/queues/resume"' in page
    client.post("/queues/resume", data={"csrf_token": token, "queue": "reports"})
    assert db.execute("SELECT paused FROM queues WHERE name = 'reports'").fetchone() == {
        "paused": False}
    with TestClient(create_app(dsn, schema=schema, read_only=True)) as read_only:
        assert 'action="/queues/pause"' not in read_only.get("/queues").text
        assert read_only.post("/queues/pause", data={"queue": "reports"}).status_code == 403
