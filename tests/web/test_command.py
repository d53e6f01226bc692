"""`pgbaton dashboard` and the bulk forms of retry and cancel, run as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton import _sql
from tests.test_metrics import free_port

ROOT = Path(__file__).resolve().parents[2]
AUTH_VARIABLES = ("PGBATON_DASHBOARD_TOKEN", "PGBATON_DASHBOARD_USER",
                  "PGBATON_DASHBOARD_PASSWORD")


def environment(dsn: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PGBATON_DSN", "DATABASE_URL", *AUTH_VARIABLES)}
    return {**env, "PGBATON_DSN": dsn, **extra}


def pgbaton_cli(*args: str, dsn: str, stdin: str = "",
                **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgbaton", *args], input=stdin,
                          capture_output=True, text=True, env=environment(dsn, **extra),
                          cwd=ROOT, timeout=120, check=False)


def test_a_non_local_bind_without_auth_is_refused(dsn: str, schema: str) -> None:
    """0.0.0.0 without a token or basic auth: one line, exit 1, nothing served."""
    answer = pgbaton_cli("dashboard", "--host", "0.0.0.0", "--schema", schema, dsn=dsn)
    assert answer.returncode == 1
    assert answer.stderr.strip().splitlines() == [
        "pgbaton: error: refusing to bind the dashboard to 0.0.0.0: anyone who reaches it "
        "could act on jobs. Set PGBATON_DASHBOARD_TOKEN, or PGBATON_DASHBOARD_USER and "
        "PGBATON_DASHBOARD_PASSWORD, or bind to 127.0.0.1"
    ]


@pytest.mark.parametrize("token", [" ", "short-token", "sixteen chars ok", "tab\there-is-long",
                                   "caf\u00e9-caf\u00e9-caf\u00e9-caf\u00e9"])
@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_a_weak_token_is_refused_at_start(dsn: str, schema: str, host: str,
                                          token: str) -> None:
    """Blank, short, with whitespace, not ASCII: one line naming the rule, exit 1, on
    any address (a weak token is no authentication, and it would unlock 0.0.0.0)."""
    answer = pgbaton_cli("dashboard", "--host", host, "--schema", schema, dsn=dsn,
                         PGBATON_DASHBOARD_TOKEN=token)
    assert answer.returncode == 1, answer.stderr
    (line,) = answer.stderr.strip().splitlines()
    assert line.startswith("pgbaton: error: the dashboard token (PGBATON_DASHBOARD_TOKEN) "
                           "is weak: it "), line
    assert "a token must be at least 16 characters, printable ASCII, no whitespace" in line


def test_the_token_rule() -> None:
    """16 printable ASCII characters pass the rule (and the bind rule); 15 do not."""
    from pgbaton.web.security import Guard, check_bind

    check_bind("0.0.0.0", Guard(token="x" * 16))
    check_bind("0.0.0.0", Guard(token="!~" * 8))
    for weak in ("x" * 15, "x" * 15 + " ", "\x00" * 16, "x" * 15 + "\u00ff", ""):
        with pytest.raises(ValueError, match="is weak"):
            Guard(token=weak)


def test_a_bad_allowed_host_is_refused_at_start(dsn: str, schema: str) -> None:
    answer = pgbaton_cli("dashboard", "--allowed-host", "https://dash.example.com/",
                         "--schema", schema, dsn=dsn)
    assert answer.returncode == 1
    assert "allowed host 'https://dash.example.com/' is not a host name" in answer.stderr


@pytest.mark.parametrize("command", ["dashboard", "metrics"])
def test_a_busy_port_is_one_line_and_exit_1(dsn: str, schema: str, command: str,
                                            queue: pgbaton.Queue) -> None:
    """A port another program listens on: one line naming the port and what to do, exit
    1, and no line claiming the server started."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        answer = pgbaton_cli(command, "--port", str(port), "--schema", schema, dsn=dsn)
    assert answer.returncode == 1, answer.stderr
    assert answer.stderr.strip().splitlines() == [
        f"pgbaton: error: port {port} on 127.0.0.1 is already in use: stop what listens "
        "there, or choose another with --port"
    ]


def test_an_address_this_machine_lacks_is_one_line_and_exit_1(dsn: str, schema: str,
                                                              queue: pgbaton.Queue) -> None:
    """192.0.2.1 (an address kept for documentation) is on no interface here."""
    answer = pgbaton_cli("dashboard", "--host", "192.0.2.1", "--port", "8123",
                         "--schema", schema, dsn=dsn,
                         PGBATON_DASHBOARD_TOKEN="a-strong-token-0123456789")
    assert answer.returncode == 1, answer.stderr
    assert answer.stderr.strip().splitlines() == [
        "pgbaton: error: cannot listen on 192.0.2.1:8123: Cannot assign requested address"
    ]


def test_an_unreachable_database_or_unmigrated_schema_is_one_line_at_start(
        dsn: str, schema: str) -> None:
    """Checked before the dashboard says it started, as every command checks."""
    answer = pgbaton_cli("dashboard", "--port", "0", "--schema", schema,
                         dsn="postgresql://postgres@127.0.0.1:1/nowhere")
    assert answer.returncode == 1
    (line,) = answer.stderr.strip().splitlines()
    assert line.startswith("pgbaton: error: cannot connect to PostgreSQL at "), line
    answer = pgbaton_cli("dashboard", "--port", "0", "--schema", schema, dsn=dsn)
    assert answer.returncode == 1
    assert answer.stderr.strip().splitlines() == [
        f"pgbaton: error: schema '{schema}' holds no pgbaton tables (this pgbaton needs "
        f"version {_sql.schema_version()}): run `pgbaton migrate` or Queue.migrate()"
    ]


def get(url: str, host: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_dashboard_command_serves(dsn: str, schema: str, queue: pgbaton.Queue) -> None:
    """`pgbaton dashboard --port N` answers /healthz and the job page; stopped by pid.
    It answers the Host names of --allowed-host and of the environment's list, and
    refuses others."""
    queue.enqueue("hello", {"who": "world"})
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pgbaton", "dashboard", "--port", str(port),
         "--schema", schema, "--allowed-host", "dash.example.com",
         "--allowed-host", "*.corp.example"],
        env=environment(dsn, PGBATON_DASHBOARD_ALLOWED_HOSTS="jobs.example.org"), cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                    assert r.read() == b"ok\n"
                    break
            except OSError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, "the dashboard did not start in 60 s"
                time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs", timeout=10) as page:
            assert "hello" in page.read().decode()
        base = f"http://127.0.0.1:{port}"
        for host in ("dash.example.com", "x.corp.example:8000", "jobs.example.org",
                     f"localhost:{port}"):
            assert get(f"{base}/healthz", host) == (200, b"ok\n"), host
        status, body = get(f"{base}/healthz", "evil.example")
        assert status == 400 and b"--allowed-host" in body
    finally:
        process.terminate()
        process.wait(30)


def test_bulk_retry_shows_the_count_and_asks(
        dsn: str, schema: str, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """`pgbaton retry --status failed --task X --since 10:00`: count first; "n" changes
    nothing; --yes retries exactly those."""
    for n in range(2):
        queue.enqueue("charge", {"n": n}, max_attempts=1)
    queue.enqueue("other", {}, max_attempts=1)
    for claim in queue.claim("w", limit=10):
        queue.fail(claim, "declined")
    since = "00:00"
    args = ("retry", "--status", "failed", "--task", "charge", "--since", since,
            "--schema", schema)
    refused = pgbaton_cli(*args, dsn=dsn, stdin="n\n")
    assert refused.returncode == 1
    assert "2 jobs of status=failed, task=charge" in refused.stdout
    assert "can be retried now" in refused.stdout and "nothing was changed" in refused.stderr
    done = pgbaton_cli(*args, "--yes", dsn=dsn)
    assert done.returncode == 0, done.stderr
    assert "retried 2 jobs" in done.stdout
    rows = db.execute("SELECT task, status FROM jobs ORDER BY task, id").fetchall()
    assert [(r["task"], r["status"]) for r in rows] == [
        ("charge", "pending"), ("charge", "pending"), ("other", "failed")]


def test_bulk_forms_refuse_nonsense(dsn: str, schema: str, queue: pgbaton.Queue) -> None:
    """A JOB_ID and filters together, no JOB_ID and no filter, a bad time: usage errors."""
    both = pgbaton_cli("cancel", "5", "--task", "x", "--schema", schema, dsn=dsn)
    assert both.returncode == 2 and "not both" in both.stderr
    neither = pgbaton_cli("cancel", "--schema", schema, dsn=dsn)
    assert neither.returncode == 2 and "give a JOB_ID" in neither.stderr
    bad = pgbaton_cli("cancel", "--since", "soon", "--schema", schema, dsn=dsn)
    assert bad.returncode == 2 and "is not a time" in bad.stderr
    single = pgbaton_cli("cancel", str(queue.enqueue("t")), "--schema", schema, dsn=dsn)
    assert single.returncode == 0 and "cancelled" in single.stdout


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_local_hosts_need_no_auth(host: str) -> None:
    """Loopback addresses pass the bind rule without authentication."""
    from pgbaton.web.security import Guard, check_bind

    check_bind(host, Guard())
