"""/workers: every worker of the workers table, idle ones too, from a real Worker's
presence beat; workers gone quiet, and holders of jobs the table does not know."""

from __future__ import annotations

import asyncio
import importlib.metadata
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import DictRow
from starlette.testclient import TestClient

import pgbaton
from pgbaton.worker import Worker, WorkerConfig

from .conftest import HOSTILE

HTML = {"Accept": "text/html"}
DEADLINE = 20.0


def until(condition: Callable[[], Any], what: str) -> Any:
    """condition()'s first truthy value, asked until DEADLINE; fails naming what."""
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {DEADLINE} s: {what}")


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    """worker.run() on an event loop of its own thread, stopped on the way out."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.run(),))
    thread.start()
    try:
        yield worker
    finally:
        loop.call_soon_threadsafe(worker.request_stop)
        thread.join(DEADLINE)
        assert not thread.is_alive(), "the worker did not stop"
        loop.close()


def row_of(db: psycopg.Connection[DictRow], worker_id: str) -> dict[str, Any] | None:
    return db.execute("SELECT * FROM workers WHERE worker_id = %s", [worker_id]).fetchone()


def test_an_idle_worker_is_listed_with_what_it_serves_and_gone_when_it_stops(
        client: TestClient, dsn: str, schema: str, queue: pgbaton.Queue,
        db: psycopg.Connection[DictRow]) -> None:
    """A worker that holds no job shows, with its queues, concurrency, version and last
    heartbeat, its hostile id and queue as text; its clean stop deletes its row."""
    app = pgbaton.App(dsn, schema=schema)

    @app.task()
    def noop() -> None:
        return None

    worker_id = f"idle {HOSTILE}"
    config = WorkerConfig(worker_id=worker_id, queues=["mail", "<b>bold</b>"],
                          concurrency=3, maintenance=False, poll_interval=0.2)
    with running(Worker(app, config)):
        row = until(lambda: row_of(db, worker_id), "the worker's row")
        assert (row["queues"], row["concurrency"], row["held"]) == (
            ["mail", "<b>bold</b>"], 3, 0)
        assert row["version"] == importlib.metadata.version("pgbaton")
        page = client.get("/workers", headers=HTML)
        assert page.status_code == 200
        assert HOSTILE not in page.text and "<b>bold</b>" not in page.text
        assert "&lt;b&gt;bold&lt;/b&gt;" in page.text
        match = re.search(r'<tr class="worker-live" data-worker="([^"]+)">(.*?)</tr>', page.text,
                          re.S)
        assert match, page.text
        cells = match[2]
        assert 'class="worker-state">idle<' in cells
        assert '<td class="concurrency">3</td>' in cells and '<td class="held">0</td>' in cells
        assert importlib.metadata.version("pgbaton") in cells
        assert re.search(r'<td class="seen"><time datetime="[^"]+" title="[^"]+">'
                         r'(just now|\d+ s ago)</time>', cells), cells
        assert "1 live" in page.text
    until(lambda: row_of(db, worker_id) is None, "the stopped worker's row deleted")
    assert "No worker has said it is alive" in client.get("/workers", headers=HTML).text
    app.queue.close()


def test_a_busy_worker_a_silent_one_and_a_holder_outside_the_table(
        client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """Held jobs are counted from the jobs table; a row not refreshed for a minute is a
    worker not seen (listed after the live ones); a worker holding jobs with no row
    (a release before the workers table) is listed apart."""
    beat = {"host": "h1", "pid": 10, "version": "9.9", "queues": None, "concurrency": 4,
            "held": 1}
    queue.worker_beat({**beat, "worker_id": "busy-one"})
    queue.worker_beat({**beat, "worker_id": "silent-one", "pid": 11})
    db.execute("UPDATE workers SET seen_at = now() - interval '1 minute' "
               "WHERE worker_id = 'silent-one'")
    queue.enqueue("t")
    queue.enqueue("t")
    queue.claim("busy-one", limit=1)
    queue.claim("old-release-worker", limit=1)
    page = client.get("/workers", headers=HTML).text
    rows = re.findall(r'<tr class="worker-(live|gone)" data-worker="([^"]+)">(.*?)</tr>',
                      page, re.S)
    assert [(state, worker) for state, worker, _ in rows] == [
        ("live", "busy-one"), ("gone", "silent-one")]
    assert 'class="worker-state">busy<' in rows[0][2]
    assert '<td class="held">1</td>' in rows[0][2] and "every queue" in rows[0][2]
    assert re.search(r'class="worker-state">not seen for 1 min \d+ s<', rows[1][2])
    holders = page.split('id="holders"', 1)[1]
    assert "old-release-worker" in holders and "busy-one" not in holders


def test_a_beat_deletes_rows_unseen_for_a_day_and_keeps_its_start(
        queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """The table never outgrows the last day's fleet; a beat of the same process keeps
    its started_at, a restart under the same id gets a new one."""
    beat = {"host": "h", "pid": 1, "version": "1", "queues": ["q"], "concurrency": 1,
            "held": 0}
    queue.worker_beat({**beat, "worker_id": "dead"})
    queue.worker_beat({**beat, "worker_id": "alive"})
    db.execute("UPDATE workers SET seen_at = now() - interval '25 hours', "
               "started_at = now() - interval '2 days'")
    queue.worker_beat({**beat, "worker_id": "alive"})
    rows = db.execute("SELECT worker_id, started_at < now() - interval '1 day' AS kept "
                      "FROM workers").fetchall()
    assert rows == [{"worker_id": "alive", "kept": True}]
    queue.worker_beat({**beat, "worker_id": "alive", "pid": 2})
    row = db.execute("SELECT started_at > now() - interval '1 minute' AS fresh "
                     "FROM workers").fetchone()
    assert row == {"fresh": True}
    queue.worker_leave({**beat, "worker_id": "alive", "pid": 1})  # not this process
    assert db.execute("SELECT count(*) AS n FROM workers").fetchone() == {"n": 1}
    queue.worker_leave({**beat, "worker_id": "alive", "pid": 2})
    assert db.execute("SELECT count(*) AS n FROM workers").fetchone() == {"n": 0}
