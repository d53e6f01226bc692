"""Every GET and POST route of the dashboard fed hostile values (empty, NUL, 300 bytes
and more, bytes that are not UTF-8, markup, SQL, huge and negative numbers) in every
parameter it reads: the answer is never a 5xx, save a 503 when the database is down.

/live is left out: a stream that answers 200 and never ends, it reads no parameter.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import quote_from_bytes

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import DictRow
from starlette.testclient import TestClient

import pgbaton
from pgbaton.web import create_app

from .conftest import Jobs, token_in

HOSTILE: list[bytes] = [
    b"", b" ", b"\x00", b"a\x00b", b"x" * 300, "\u00e9".encode() * 300, b"q" * 5000,
    b"\xff\xfe", b"\xed\xa0\x80", b"\xc3", b"<script>alert(1)</script>",
    b"\"'><img src=x onerror=alert(1)>", b"'; DROP TABLE jobs; --", b"1 OR 1=1",
    b"9" * 40, b"-1", b"0", b"-9223372036854775809", b"9223372036854775808",
    b"2147483648", b"1e308", b"NaN", b"inf", b"0x10", "\u0663".encode(), b"\t\n",
    b"../../etc/passwd", b"%00", b"%ff", b"\r\nSet-Cookie: x=1", b"failed", b"10:00",
]
VALUES = st.one_of(st.sampled_from(HOSTILE), st.binary(max_size=400),
                   st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))
FILTERS = ("status", "queue", "task", "key", "q", "since", "until", "ids")
FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def q(value: bytes) -> str:
    return quote_from_bytes(value, safe="")


def form(fields: dict[str, bytes]) -> bytes:
    return "&".join(f"{name}={q(value)}" for name, value in fields.items()).encode()


@pytest.fixture
def session(client: TestClient, jobs: Jobs) -> tuple[TestClient, str]:
    page = client.get("/jobs", headers={"Accept": "text/html"})
    return client, token_in(page.text)


def no_server_error(answer: httpx.Response, what: str) -> None:
    assert answer.status_code < 500, (what, answer.status_code, answer.text[:300])


GET_ROUTES = [
    "/?partial={v}", "/jobs?{f}={v}", "/jobs?limit={v}", "/jobs?before={v}", "/jobs/{v}",
    "/jobs/{v}?done={v}", "/jobs/bulk?action={v}&{f}={v}",
    "/jobs/bulk?action=priority&priority={v}&{f}={v}", "/queues?done={v}",
    "/jobs?partial=tabs&{f}={v}", "/jobs/bulk?action=retry&ids={v}&ids={v}",
    "/workers?{f}={v}",
    "/periodic?{f}={v}", "/healthz?{f}={v}", "/metrics?{f}={v}", "/static/{v}", "/{v}",
]


@FUZZ
@given(route=st.sampled_from(GET_ROUTES), field=st.sampled_from(FILTERS), value=VALUES,
       html=st.booleans())
def test_every_get_route_refuses_hostile_values_with_a_4xx(
        session: tuple[TestClient, str], route: str, field: str, value: bytes,
        html: bool) -> None:
    client, _ = session
    path = route.replace("{f}", field).replace("{v}", q(value))
    answer = client.get(path, headers={"Accept": "text/html" if html else "*/*"})
    no_server_error(answer, path)


@FUZZ
@given(field=st.sampled_from(FILTERS), value=VALUES)
def test_the_health_page_refuses_hostile_values_with_a_4xx(
        session: tuple[TestClient, str], field: str, value: bytes) -> None:
    client, _ = session
    no_server_error(client.get(f"/health?{field}={q(value)}"), "/health")


@FUZZ
@given(action=st.sampled_from(["retry", "cancel", "delete", "run-now", "priority"]),
       job=st.one_of(st.sampled_from([b"1", b"2", b"7"]), VALUES), value=VALUES)
def test_every_job_action_refuses_hostile_values_with_a_4xx(
        session: tuple[TestClient, str], action: str, job: bytes, value: bytes) -> None:
    client, token = session
    path = f"/jobs/{q(job)}/{action}"
    answer = client.post(path, content=form({"csrf_token": token.encode(), "priority": value}),
                         headers={"Content-Type": "application/x-www-form-urlencoded"},
                         follow_redirects=False)
    no_server_error(answer, path)


@FUZZ
@given(fields=st.dictionaries(
    st.sampled_from(["action", "upto", "priority", *FILTERS]), VALUES, min_size=1),
    action=st.sampled_from([b"retry", b"cancel", b"priority", b"delete"]))
def test_the_bulk_action_refuses_hostile_values_with_a_4xx(
        session: tuple[TestClient, str], fields: dict[str, bytes], action: bytes) -> None:
    client, token = session
    body = form({"action": action, "upto": b"0", **fields, "csrf_token": token.encode()})
    answer = client.post("/jobs/bulk", content=body,
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
    no_server_error(answer, repr(fields))


@FUZZ
@given(action=st.one_of(st.sampled_from([b"pause", b"resume"]), VALUES), name=VALUES)
def test_pause_and_resume_refuse_hostile_queue_names_with_a_4xx(
        session: tuple[TestClient, str], action: bytes, name: bytes) -> None:
    client, token = session
    path = f"/queues/{q(action)}"
    answer = client.post(path, content=form({"csrf_token": token.encode(), "queue": name}),
                         headers={"Content-Type": "application/x-www-form-urlencoded"},
                         follow_redirects=False)
    no_server_error(answer, f"{path} queue={name!r}")


@pytest.mark.parametrize("name", ["", "a\x00b", "x" * 300])
def test_pause_with_a_bad_queue_name_is_a_400_that_says_why(
        session: tuple[TestClient, str], db: psycopg.Connection[DictRow], name: str) -> None:
    """The defect as found: each of these was a 500."""
    client, token = session
    answer = client.post("/queues/pause", data={"csrf_token": token, "queue": name},
                         headers={"Accept": "text/html"})
    assert answer.status_code == 400, answer.text[:300]
    assert "queue" in answer.text and "Internal Server Error" not in answer.text
    assert db.execute("SELECT count(*) AS n FROM queues WHERE paused").fetchone() == {"n": 0}


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on while the test runs (bound, never listening)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def test_with_the_database_down_every_route_is_a_503_or_a_4xx(
        closed_port: int, queue: pgbaton.Queue) -> None:
    """No server at the DSN: the pages and actions that need it are 503, never 500."""
    down = f"postgresql://postgres@127.0.0.1:{closed_port}/nowhere?connect_timeout=2"
    with TestClient(create_app(down)) as client:
        page = client.get("/healthz")
        assert page.status_code == 503
        token = token_in(client.get("/no-such-page", headers={"Accept": "text/html"}).text)
        for path in ("/", "/jobs", "/jobs/5", "/jobs/bulk?action=retry", "/queues",
                     "/workers", "/periodic", "/health", "/metrics"):
            answer = client.get(path)
            assert answer.status_code in (200, 503), (path, answer.status_code, answer.text)
        assert client.get("/jobs").status_code == 503
        for path, data in (("/jobs/5/retry", {}), ("/jobs/5/priority", {"priority": "3"}),
                           ("/jobs/bulk", {"action": "retry", "upto": "9"}),
                           ("/queues/pause", {"queue": "mail"})):
            answer = client.post(path, data={"csrf_token": token, **data})
            assert answer.status_code == 503, (path, answer.status_code, answer.text)
            assert "cannot be reached" in answer.text
