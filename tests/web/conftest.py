"""Fixtures for the dashboard: the app on a fresh schema, and jobs in every state."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import pgbaton

pytest.importorskip("starlette", reason="the dashboard needs the extra pgbaton[web]")

from starlette.testclient import TestClient

from pgbaton.web import create_app

HOSTILE = '<script>alert("owned")</script><img src=x onerror=alert(1)>'


@pytest.fixture(autouse=True)
def _testclient_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starlette's TestClient sends Host: testserver, a name the dashboard answers only
    when told to (tests of the Host rule send other names)."""
    monkeypatch.setenv("PGBATON_DASHBOARD_ALLOWED_HOSTS", "testserver")


@dataclass
class Jobs:
    """One job in each state, by name, plus a scheduled one and a keyed pair."""

    pending: int
    scheduled: int
    running: int
    done: int
    failed: int
    cancelled: int
    hostile: int
    keyed: tuple[int, int]


@pytest.fixture
def jobs(queue: pgbaton.Queue) -> Jobs:
    """Jobs in every state, written through the queue's own API."""
    done = queue.enqueue("send_mail", {"to": "a@example.com"}, queue="mail")
    (claim,) = queue.claim("worker-done", limit=1)
    queue.complete(claim, {"sent": True})
    failed = queue.enqueue("charge", {"amount": 5}, max_attempts=1)
    (claim,) = queue.claim("worker-fail", limit=1)
    queue.fail(claim, RuntimeError("card declined: insufficient funds"))
    cancelled = queue.enqueue("charge", {"amount": 6})
    queue.cancel(cancelled)
    running = queue.enqueue("resize", {"image": 1}, queue="media")
    (claim,) = queue.claim("worker-running", limit=1, lease=600)
    assert claim.id == running
    keyed = (
        queue.enqueue("sync", {"n": 1}, key="customer-7", queue="sync"),
        queue.enqueue("sync", {"n": 2}, key="customer-7", queue="sync"),
    )
    pending = queue.enqueue("send_mail", {"to": "b@example.com"}, queue="mail")
    scheduled = queue.enqueue("report", {"day": 1}, delay=3600, queue="reports")
    hostile = queue.enqueue("render", {"title": HOSTILE}, queue="reports", delay=3600)
    return Jobs(pending, scheduled, running, done, failed, cancelled, hostile, keyed)


@pytest.fixture
def client(dsn: str, schema: str, queue: pgbaton.Queue,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The dashboard with no authentication configured (as on 127.0.0.1)."""
    for name in ("PGBATON_DASHBOARD_TOKEN", "PGBATON_DASHBOARD_USER",
                 "PGBATON_DASHBOARD_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    with TestClient(create_app(dsn, schema=schema)) as test_client:
        yield test_client


def csrf_token(client: TestClient, path: str = "/jobs", **headers: str) -> str:
    """The CSRF token a page hands this client's session (its forms and its head)."""
    page = client.get(path, headers={"Accept": "text/html", **headers})
    assert page.status_code == 200
    return token_in(page.text)


def token_in(html: str) -> str:
    match = re.search(r'<meta name="pgbaton-csrf" content="([^"]+)">', html)
    assert match, html[:300]
    return match[1]
