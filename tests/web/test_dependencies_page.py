"""The job page shows what a job waits for and what waits for it, and a waiting job can
be cancelled from it."""

from __future__ import annotations

import psycopg
from psycopg.rows import DictRow
from starlette.testclient import TestClient

import pgbaton

from .conftest import csrf_token

HTML = {"Accept": "text/html"}


def test_the_job_page_links_parents_and_children(
        client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """Both directions are linked; the waiting child offers Cancel, and its cancel
    (a form post) is an end like any other."""
    parent = queue.enqueue("extract")
    child = queue.enqueue("load", after=[parent], after_failure="run")
    page = client.get(f"/jobs/{child}", headers=HTML).text
    assert 'id="dependencies"' in page and f'href="/jobs/{parent}"' in page
    assert "waits for" in page and "runs after a failure" in page
    assert 'id="field-waiting_for">1<' in page
    assert f'action="/jobs/{child}/cancel"' in page
    page = client.get(f"/jobs/{parent}", headers=HTML).text
    assert "waited for by" in page and f'href="/jobs/{child}"' in page
    answer = client.post(f"/jobs/{child}/cancel", data={"csrf_token": csrf_token(client)},
                         headers=HTML, follow_redirects=False)
    assert answer.status_code == 303
    row = db.execute("SELECT status FROM jobs WHERE id = %s", (child,)).fetchone()
    assert row == {"status": "cancelled"}
    plain = client.get(f"/jobs/{parent}", headers=HTML)
    assert plain.status_code == 200
