"""Requests a hostile or careless client sends: each is a 4xx that names the problem,
never a 500, and nothing is written."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg.rows import DictRow
from starlette.testclient import TestClient

from .conftest import Jobs, csrf_token

SNAPSHOT = "SELECT md5(string_agg(j::text, '' ORDER BY id)) AS h FROM jobs j"

# (method, path, form or None, expected status, words the answer must contain)
GETS = [
    ("/jobs?before=9223372036854775808", 400, "before="),
    ("/jobs?before=-5", 400, "before="),
    ("/jobs?limit=1e3", 400, "limit"),
    ("/jobs?status=failed&status=done", 200, ""),  # the first wins, as Starlette reads it
    ("/jobs?since=99999-01-01", 400, "is not a time"),
    ("/jobs?since=0000-01-01", 400, "is not a time"),
    ("/jobs?until=10:99", 400, "is not a time"),
    # Bytes that are not UTF-8 arrive as U+FFFD: a filter that matches nothing.
    ("/jobs?task=%ff%fe", 200, "No job matches."),
    ("/jobs?q=%ED%A0%80", 200, "No job matches."),
    ("/jobs?q=" + "x" * 20_000, 400, "text is longer than 200 characters"),
    ("/jobs?queue=" + "q" * 5_000, 400, "queue"),
    ("/jobs/-1", 404, ""),
    ("/jobs/0", 404, ""),
    ("/jobs/1e3", 404, ""),
    ("/jobs/9223372036854775807", 404, "there is no job"),
    ("/jobs/bulk?action=retry&since=later", 400, "is not a time"),
    ("/jobs/bulk", 400, "action"),
    ("/?partial=maybe", 200, ""),
    ("/static/../../etc/passwd", 404, ""),
    ("/static/%2e%2e/%2e%2e/etc/passwd", 404, ""),
]


@pytest.mark.parametrize(("path", "status", "words"), GETS, ids=[g[0][:40] for g in GETS])
def test_hostile_gets(*, client: TestClient, jobs: Jobs, db: psycopg.Connection[DictRow],
                      path: str, status: int, words: str) -> None:
    """Malformed ids, cursors, times, encodings and sizes: a 4xx naming the problem."""
    before = db.execute(SNAPSHOT).fetchone()
    answer = client.get(path)
    assert answer.status_code == status, (path, answer.status_code, answer.text[:300])
    assert words in answer.text, (path, answer.text[:300])
    assert db.execute(SNAPSHOT).fetchone() == before


def test_hostile_posts(client: TestClient, jobs: Jobs,
                       db: psycopg.Connection[DictRow]) -> None:
    """Forms with a valid CSRF token but nonsense in them: 4xx, nothing written."""
    token = csrf_token(client)
    before = db.execute(SNAPSHOT).fetchone()
    cases = [
        (f"/jobs/{jobs.pending}/priority", {"priority": "2147483648"}, 400, "priority"),
        (f"/jobs/{jobs.pending}/priority", {"priority": "-2147483649"}, 400, "priority"),
        (f"/jobs/{jobs.pending}/priority", {}, 400, "priority"),
        (f"/jobs/{jobs.pending}/priority", {"priority": "1" * 5000}, 400, "priority"),
        ("/jobs/99999999999999999999/retry", {}, 404, ""),
        ("/jobs/bulk", {"action": "retry", "status": "failed"}, 400, "upto"),
        ("/jobs/bulk", {"action": "retry", "status": "failed", "upto": "lots"}, 400, "upto"),
        ("/jobs/bulk", {"action": "retry", "status": "failed",
                        "upto": "9223372036854775808"}, 400, "upto"),
        ("/jobs/bulk", {"action": "explode", "upto": "5"}, 400, "action"),
        ("/jobs/bulk", {"action": "retry", "status": "exploded", "upto": "5"}, 400, "status"),
        ("/jobs/bulk", {"action": "priority", "status": "pending", "upto": "5",
                        "priority": "x"}, 400, "priority"),
    ]
    for path, form, status, words in cases:
        answer = client.post(path, data={"csrf_token": token, **form})
        assert answer.status_code == status, (path, form, answer.status_code,
                                              answer.text[:300])
        assert words in answer.text, (path, form, answer.text[:300])
    for method in ("put", "delete", "patch"):
        assert client.request(method, f"/jobs/{jobs.pending}").status_code == 405
    assert db.execute(SNAPSHOT).fetchone() == before


def test_an_oversized_form_is_refused(client: TestClient, jobs: Jobs,
                                      db: psycopg.Connection[DictRow]) -> None:
    """A 5 MB body, with its length or streamed without one: 413 saying the limit;
    5,000 small fields: 400 saying which limit; nothing written."""
    token = csrf_token(client)
    before = db.execute(SNAPSHOT).fetchone()
    path = f"/jobs/{jobs.pending}/priority"
    answer = client.post(path, data={"csrf_token": token, "priority": "1",
                                     "pad": "x" * 5_000_000})
    assert answer.status_code == 413 and "larger than 64 KiB" in answer.text, answer.text

    def streamed() -> Iterator[bytes]:
        yield f"csrf_token={token}&priority=1&pad=".encode()
        for _ in range(100):
            yield b"x" * 50_000

    answer = client.post(path, content=streamed(),
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 413 and "larger than 64 KiB" in answer.text, answer.text
    answer = client.post(path, data={"csrf_token": token, "priority": "1",
                                     **{f"f{n}": "1" for n in range(5_000)}})
    assert answer.status_code == 400 and "Too many fields" in answer.text, answer.text[:300]
    assert db.execute(SNAPSHOT).fetchone() == before
