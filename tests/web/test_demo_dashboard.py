"""`pgbaton demo --dashboard`: the demo's jobs seen moving in the dashboard while the
demo runs, kept after its report until Ctrl-C, and its schema dropped then."""

from __future__ import annotations

import queue as queue_module
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import psycopg

from .test_command import ROOT, environment
from .test_metrics import free_port


def _sessions(dsn: str) -> list[tuple[object, ...]]:
    """What every other session of the server is doing, and which lock it waits for:
    what a test says when something did not end."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT pid, application_name, state, wait_event_type, wait_event,"
            " pg_blocking_pids(pid), left(query, 120) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchall()


def _drained(lines: queue_module.Queue[str]) -> list[str]:
    drained = []
    while True:
        try:
            drained.append(lines.get_nowait())
        except queue_module.Empty:
            return drained


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def _lines_of(process: subprocess.Popen[str]) -> queue_module.Queue[str]:
    lines: queue_module.Queue[str] = queue_module.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _wait_for_line(lines: queue_module.Queue[str], seen: list[str],
                   wanted: Callable[[str], bool], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue_module.Empty:
            raise AssertionError(f"no such line in {timeout} s: {''.join(seen)}") from None
        seen.append(line)
        if wanted(line):
            return line


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
    seen: list[str] = []
    try:
        lines = _lines_of(process)
        line = _wait_for_line(lines, seen, lambda text: "Watch it live" in text, 120)
        assert f"http://127.0.0.1:{port}/" in line
        base = f"http://127.0.0.1:{port}"
        during: set[str] = set()
        deadline = time.monotonic() + 240
        kept = None
        while kept is None:
            assert time.monotonic() < deadline, "".join(seen)
            overview = _page(f"{base}/?partial=1")
            during |= set(re.findall(r'data-queue="(\w+)"', overview))
            if re.search(r'<dd class="running">[1-9]', overview):
                during.add("jobs running")
            try:
                kept = next(text for text in iter(lines.get_nowait, None)
                            if "until you press Ctrl-C" in text)
            except (queue_module.Empty, StopIteration):
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
                f"the demo did not end within 60 s of SIGINT; its output: {''.join(seen)}"
                f"{''.join(_drained(lines))}; the server's sessions then: {_sessions(dsn)}"
            ) from None
        assert status == 0, "".join(seen)
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
