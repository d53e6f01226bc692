"""The dashboard costs the database nothing while nobody looks: its one LISTEN session
exists only while an overview page holds the live stream open."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from tests.test_metrics import free_port

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


async def test_a_page_that_opens_the_stream_is_sent_no_older_overview(dsn: str) -> None:
    """A page renders the overview fresh, then opens the stream. The hub once handed
    each new subscriber the last panel it had rendered, older than that page whenever
    the data changed between the two (and another page kept the hub running), and the
    page then showed the old counts until the next change: the browser test's hostile
    queue missing from the overview. A new subscriber now wakes a render instead."""
    from pgbaton.web.live import LiveHub

    state = {"html": "before the change"}

    async def render() -> str:
        return state["html"]

    hub = LiveHub(dsn, "pgbaton_test_no_such_channel", render, poll_seconds=60)
    try:
        first_page = hub.subscribe()
        assert await asyncio.wait_for(first_page.get(), WAIT) == "before the change"
        state["html"] = "after the change"  # what the second page was rendered with
        second_page = hub.subscribe()
        assert await asyncio.wait_for(second_page.get(), WAIT) == "after the change"
        assert await asyncio.wait_for(first_page.get(), WAIT) == "after the change"
    finally:
        await hub.stop()


async def test_a_page_rendered_between_two_equal_panels_still_gets_one(dsn: str) -> None:
    """A page rendered while the counts were briefly other than the hub's last panel,
    which subscribes once they are back to it: the hub's next render equals its last,
    so a hub that sends only changes would leave that page showing the brief counts."""
    from pgbaton.web.live import LiveHub

    state = {"html": "steady"}

    async def render() -> str:
        return state["html"]

    hub = LiveHub(dsn, "pgbaton_test_no_such_channel", render, poll_seconds=60)
    try:
        first_page = hub.subscribe()
        assert await asyncio.wait_for(first_page.get(), WAIT) == "steady"
        # The second page was rendered with a brief "blip"; by its subscribe, "steady" again.
        second_page = hub.subscribe()
        assert await asyncio.wait_for(second_page.get(), WAIT) == "steady"
        assert first_page.empty()  # nothing changed for the first page: nothing sent
    finally:
        await hub.stop()
