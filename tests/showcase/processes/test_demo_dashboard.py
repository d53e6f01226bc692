"""`pgbaton demo --dashboard`: the demo's jobs seen moving in the dashboard while the
demo runs, kept after its report until Ctrl-C, and its schema dropped then."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psycopg

from tests.helpers import OutputLines
from tests.test_metrics import free_port
from tests.web.test_command import ROOT, environment


def _sessions(dsn: str) -> list[tuple[object, ...]]:
    """What every other session of the server is doing, and which lock it waits for:
    what a test says when something did not end."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT pid, application_name, state, wait_event_type, wait_event,"
            " pg_blocking_pids(pid), left(query, 120) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchall()


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def test_the_demo_is_watched_live_and_kept_until_ctrl_c(dsn: str) -> None:
    """The overview shows the demo's queues and running jobs while it runs; after the
    report the schema stays (the failed poison job is on the job list); SIGINT ends the
    process with the report's status and drops the schema."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pgbaton", "demo", "--dsn", dsn, "--dashboard",
         "--port", str(port)],
        env=environment(dsn, COLUMNS="200"), cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    output = OutputLines(process)
    try:
        line = output.wait_for(lambda text: "Watch it live" in text, 120)
        assert f"http://127.0.0.1:{port}/" in line
        base = f"http://127.0.0.1:{port}"
        during: set[str] = set()
        deadline = time.monotonic() + 240
        kept = None
        while kept is None:
            assert time.monotonic() < deadline, output.text
            try:
                overview = _page(f"{base}/?partial=1")
            except urllib.error.URLError as error:
                # The dashboard ends with the demo: what the demo said is the evidence.
                raise AssertionError(f"the dashboard stopped answering ({error}); the "
                                     f"demo's output: {output.rest(1)}") from None
            during |= set(re.findall(r'data-queue="(\w+)"', overview))
            if re.search(r'<dd class="running"><a [^>]*>[1-9]', overview):
                during.add("jobs running")
            kept = next((text for text in output.arrived()
                         if "until you press Ctrl-C" in text), None)
            if kept is None:
                time.sleep(0.2)
        match = re.search(r"schema (pgbaton_demo_\w+)", kept)
        assert match, kept
        schema = match[1]
        assert {"long", "default", "jobs running"} <= during, during
        failed = _page(f"{base}/jobs?status=failed")
        assert "poison" in failed
        process.send_signal(signal.SIGINT)
        try:
            status = process.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the demo did not end within 60 s of SIGINT; its output: {output.rest(1)}"
                f"; the server's sessions then: {_sessions(dsn)}"
            ) from None
        assert status == 0, output.text
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                           (schema,)).fetchone()
    assert row == (0,)
    try:
        _page(f"{base}/healthz")
        raise AssertionError("the dashboard still answers after the demo ended")
    except urllib.error.URLError:
        pass
