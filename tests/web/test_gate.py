"""What a web page in the operator's browser can make the dashboard do: DNS rebinding
(a Host the dashboard was not told of), a form posted from another origin, a CSRF
token read in one browser and replayed from another. Over a real socket, with httpx.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest
import uvicorn
from psycopg.rows import DictRow
from starlette.applications import Starlette
from starlette.testclient import TestClient

import pgbaton
from pgbaton.web import create_app
from tests.test_metrics import free_port

from .conftest import token_in

WAIT = 20.0
TOKEN = "a-token-of-32-characters-and-up!"


def paused(db: psycopg.Connection[DictRow], name: str) -> bool:
    row = db.execute("SELECT paused FROM queues WHERE name = %s", [name]).fetchone()
    return bool(row and row["paused"])


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Starlette], str]]:
    """serve(app): the app on a free loopback port under uvicorn, its base URL."""
    for name in ("PGBATON_DASHBOARD_TOKEN", "PGBATON_DASHBOARD_USER",
                 "PGBATON_DASHBOARD_PASSWORD", "PGBATON_DASHBOARD_ALLOWED_HOSTS"):
        monkeypatch.delenv(name, raising=False)
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(app: Starlette) -> str:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        started = threading.Event()
        for _ in range(int(WAIT / 0.05)):
            if server.started:
                started.set()
                break
            started.wait(0.05)
        assert server.started, "uvicorn did not start"
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(WAIT)


@pytest.fixture
def dashboard(serve: Callable[[Starlette], str], dsn: str, schema: str,
              queue: pgbaton.Queue) -> Iterator[tuple[str, httpx.Client]]:
    """The default dashboard (no authentication, loopback) with a queue "mail", and an
    httpx client that has a session on it."""
    queue.enqueue("send", {}, queue="mail")
    queue.set_concurrency("mail", 2)
    base = serve(create_app(dsn, schema=schema))
    with httpx.Client(base_url=base, timeout=WAIT) as client:
        yield base, client


def test_a_host_it_was_not_told_of_is_a_400_without_a_token(
        dashboard: tuple[str, httpx.Client]) -> None:
    """DNS rebinding: a name of the attacker's pointed at 127.0.0.1 arrives as its Host.
    Refused on every route, with a page that says why and how to allow a name, and
    nothing a page could use: no session cookie, no CSRF token."""
    _, client = dashboard
    for path in ("/", "/jobs", "/queues", "/metrics", "/healthz", "/health",
                 "/static/dashboard.css", "/no-such-page"):
        answer = client.get(path, headers={"Host": "evil.example", "Accept": "text/html"})
        assert answer.status_code == 400, (path, answer.status_code)
        assert "evil.example" in answer.text and "DNS rebinding" in answer.text
        assert "--allowed-host" in answer.text and "PGBATON_DASHBOARD_ALLOWED_HOSTS" in (
            answer.text)
        assert "pgbaton-csrf" not in answer.text and "csrf_token" not in answer.text
        assert "set-cookie" not in answer.headers
    plain = client.get("/healthz", headers={"Host": "evil.example:8000"})
    assert plain.status_code == 400 and plain.text.startswith("400: this dashboard does not")
    assert client.post("/queues/pause", headers={"Host": "evil.example"},
                       data={"queue": "mail"}).status_code == 400


def test_loopback_names_on_any_port_are_answered(
        dashboard: tuple[str, httpx.Client]) -> None:
    """localhost, 127.0.0.1 and [::1], with or without a port: pages, /metrics and
    /healthz as before."""
    _, client = dashboard
    for host in ("localhost", "LOCALHOST:1234", "127.0.0.1", "127.0.0.1:8000", "[::1]",
                 "[::1]:8000"):
        for path in ("/jobs", "/metrics", "/healthz"):
            answer = client.get(path, headers={"Host": host})
            assert answer.status_code == 200, (host, path, answer.text[:200])
    for host in ("localhost.evil.example", "127.0.0.1.nip.io", "[::2]", "10.0.0.1",
                 "localhost:abc", ""):
        assert client.get("/jobs", headers={"Host": host}).status_code == 400, host


def test_operator_hosts_are_answered(serve: Callable[[Starlette], str], dsn: str,
                                     schema: str, queue: pgbaton.Queue,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """create_app(allowed_hosts=...): a name on any port, name:port on that port,
    *.domain for its subdomains; PGBATON_DASHBOARD_ALLOWED_HOSTS when not given."""
    base = serve(create_app(dsn, schema=schema, allowed_hosts=[
        "dash.example.com", "ops.example.com:8443", "*.corp.example"]))
    monkeypatch.setenv("PGBATON_DASHBOARD_ALLOWED_HOSTS", " jobs.example.org ,, ")
    from_env = serve(create_app(dsn, schema=schema))
    with httpx.Client(timeout=WAIT) as client:
        for host, status in (("dash.example.com", 200), ("DASH.example.com:80", 200),
                             ("ops.example.com:8443", 200), ("ops.example.com", 400),
                             ("a.corp.example", 200), ("corp.example", 400),
                             ("localhost:9", 200), ("jobs.example.org", 400)):
            answer = client.get(f"{base}/healthz", headers={"Host": host})
            assert answer.status_code == status, (host, answer.text)
        assert client.get(f"{from_env}/metrics",
                          headers={"Host": "jobs.example.org"}).status_code == 200
        assert client.get(f"{from_env}/metrics",
                          headers={"Host": "dash.example.com"}).status_code == 400
    with pytest.raises(ValueError, match="is not a host name"):
        create_app(dsn, schema=schema, allowed_hosts=["https://dash.example.com/"])


def test_a_post_from_another_origin_is_a_403_and_changes_nothing(
        dashboard: tuple[str, httpx.Client], db: psycopg.Connection[DictRow]) -> None:
    """A form of evil.example posted to the dashboard, with the session's own cookie and
    even its own CSRF token: refused by its Origin (or Referer, or Sec-Fetch-Site)."""
    base, client = dashboard
    token = token_in(client.get("/queues").text)
    form = {"csrf_token": token, "queue": "mail"}
    for headers in ({"Origin": "http://evil.example"},
                    {"Origin": "http://127.0.0.1.evil.example"},
                    {"Origin": base + "0"},  # another port
                    {"Origin": "null"},
                    {"Referer": "http://evil.example/page.html"},
                    {"Sec-Fetch-Site": "cross-site", "Origin": base},
                    {"Origin": "http://[", "Referer": base + "/queues"}):
        answer = client.post("/queues/pause", data=form, follow_redirects=False,
                             headers={**headers, "Accept": "text/html"})
        assert answer.status_code == 403, (headers, answer.status_code, answer.text[:200])
        assert "nothing was changed" in answer.text and "origin" in answer.text.lower()
        assert not paused(db, "mail"), headers
    # Its own pages, and a script that sends neither header (the CSRF token still counts).
    for headers in ({"Origin": base}, {"Referer": base + "/queues"},
                    {"Sec-Fetch-Site": "same-origin", "Origin": base}, {}):
        client.post("/queues/resume", data=form, headers={"Origin": base})
        assert not paused(db, "mail")
        answer = client.post("/queues/pause", data=form, follow_redirects=False,
                             headers=headers)
        assert answer.status_code == 303, (headers, answer.text[:300])
        assert paused(db, "mail"), headers


def test_the_bearer_token_needs_no_origin(serve: Callable[[Starlette], str], dsn: str,
                                          schema: str, queue: pgbaton.Queue,
                                          db: psycopg.Connection[DictRow]) -> None:
    """A script with the bearer token is no browser page: its Origin is not judged. The
    same request without the token is refused."""
    queue.set_concurrency("mail", 1)
    base = serve(create_app(dsn, schema=schema, token=TOKEN))
    with httpx.Client(base_url=base, timeout=WAIT) as client:
        refused = client.post("/queues/pause", data={"queue": "mail"},
                              headers={"Origin": "http://evil.example"})
        assert refused.status_code == 403 and not paused(db, "mail")
        answer = client.post("/queues/pause", data={"queue": "mail"},
                             follow_redirects=False,
                             headers={"Origin": "http://evil.example",
                                      "Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 303 and paused(db, "mail")


def test_a_csrf_token_of_one_browser_is_refused_in_another(
        dashboard: tuple[str, httpx.Client], db: psycopg.Connection[DictRow]) -> None:
    """Browsers A and B each get a session; what A's page shows (its token) replayed
    from B, as the form field and as any cookie B can be made to hold, is a 403 and the
    queue stays unpaused; each with its own token may act."""
    base, a = dashboard
    with httpx.Client(base_url=base, timeout=WAIT) as b:
        page_a = a.get("/queues").text
        token_a = token_in(page_a)
        token_b = token_in(b.get("/queues").text)
        assert token_a != token_b
        assert a.cookies["pgbaton_session"] != b.cookies["pgbaton_session"]
        assert a.cookies["pgbaton_session"] not in page_a  # HttpOnly, never in a page
        for name in ("pgbaton_csrf", "pgbaton_session"):  # the old cookie, and the new
            with httpx.Client(base_url=base, timeout=WAIT) as victim:
                victim.get("/queues")
                victim.cookies.clear()
                victim.cookies.set(name, token_a)
                answer = victim.post("/queues/pause", headers={"Origin": base},
                                     data={"csrf_token": token_a, "queue": "mail"})
                assert answer.status_code == 403 and "CSRF" in answer.text, name
                assert not paused(db, "mail")
        answer = b.post("/queues/pause", data={"csrf_token": token_a, "queue": "mail"},
                        headers={"Origin": base, "Accept": "text/html"})
        assert answer.status_code == 403 and "CSRF" in answer.text
        assert not paused(db, "mail")
        answer = a.post("/queues/pause", data={"csrf_token": token_b, "queue": "mail"},
                        headers={"Origin": base})
        assert answer.status_code == 403 and not paused(db, "mail")
        assert b.post("/queues/pause", data={"csrf_token": token_b, "queue": "mail"},
                      headers={"Origin": base}, follow_redirects=False).status_code == 303
        assert paused(db, "mail")
        assert a.post("/queues/resume", data={"csrf_token": token_a, "queue": "mail"},
                      headers={"Origin": base}, follow_redirects=False).status_code == 303
        assert not paused(db, "mail")


def cookie_flags(answer: Any) -> str:
    (cookie,) = [v for k, v in answer.headers.multi_items()
                 if k == "set-cookie" and v.startswith("pgbaton_session=")]
    return str(cookie).lower()


def test_the_session_cookie_is_httponly_strict_and_secure_over_https(
        dsn: str, schema: str, queue: pgbaton.Queue) -> None:
    """HttpOnly and SameSite=Strict always; Secure when the page came over https; a
    random id per browser, kept while valid."""
    with TestClient(create_app(dsn, schema=schema)) as plain:
        first = plain.get("/jobs")
        flags = cookie_flags(first)
        assert "httponly" in flags and "samesite=strict" in flags and "secure" not in flags
        assert "set-cookie" not in plain.get("/jobs").headers  # kept
    with TestClient(create_app(dsn, schema=schema), base_url="https://testserver") as tls:
        assert "; secure" in cookie_flags(tls.get("/jobs"))
