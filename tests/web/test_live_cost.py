"""The dashboard costs the database nothing while nobody looks: its one LISTEN session
exists only while an overview page holds the live stream open."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton

from .test_metrics import free_port

WAIT = 20.0


@pytest.fixture
def served(dsn: str, schema: str, queue: pgbaton.Queue,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The dashboard served by uvicorn on a free local port, from a thread."""
    import uvicorn

    from pgbaton.web import create_app

    for name in ("PGBATON_DASHBOARD_TOKEN", "PGBATON_DASHBOARD_USER",
                 "PGBATON_DASHBOARD_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(dsn, schema=schema), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    until(lambda: server.started, "uvicorn to start")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(WAIT)


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_live_session_lives_only_while_a_page_watches(
        served: str, schema: str, queue: pgbaton.Queue,
        db: psycopg.Connection[DictRow]) -> None:
    """Pages alone open no LISTEN session; the live stream opens one, a NOTIFY (an
    enqueue) sends a fresh overview down it, and closing it closes the session."""

    def listening() -> int:
        row = db.execute(
            "SELECT count(*) AS n FROM pg_stat_activity "
            "WHERE application_name = 'pgbaton dashboard live' AND query LIKE %s",
            (f"%LISTEN%{schema}_jobs%",)).fetchone()
        return int(row["n"]) if row else -1

    for path in ("/", "/jobs", "/queues", "/?partial=1", "/metrics"):
        with urllib.request.urlopen(served + path, timeout=WAIT) as page:
            assert page.status == 200
    assert listening() == 0
    stream = urllib.request.urlopen(served + "/live", timeout=WAIT)
    try:
        first = stream.readline()
        while not first.startswith(b"data:"):
            first = stream.readline()
        until(lambda: listening() == 1, "the LISTEN session")
        queue.enqueue("watched", queue="queue_seen_live")
        deadline = time.monotonic() + WAIT
        while b"queue_seen_live" not in stream.readline():
            assert time.monotonic() < deadline, "the new queue never came down the stream"
    finally:
        stream.close()
    until(lambda: listening() == 0, "the LISTEN session to close")
