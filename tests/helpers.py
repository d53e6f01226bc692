"""Small helpers shared by the tests: waiting on the database clock, reading rows,
reading a child process's output, running processes from one start line, a DSN in
another client encoding."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

# A job's text field holding a character LATIN1 has not, and the error's words for it
# (tests/queue/test_client_encoding.py, test_enqueue_copy.py).
UNENCODABLE_FIELDS: dict[str, tuple[dict[str, Any], str]] = {
    "task": ({"task": "5 €"}, "task '5 €'"),
    "queue": ({"queue": "5 €"}, "queue '5 €'"),
    "key": ({"key": "5 €"}, "key '5 €'"),
    "limit_key": ({"limit_key": "5 €"}, "limit_key '5 €'"),
    "args": ({"args": {"price": "5 €"}}, "args for task 't'"),
    "idempotency_key": ({"idempotency_key": "5 €"}, "idempotency_key '5 €'"),
}


async def wait_for(condition: Callable[[], Any], what: str, seconds: float = 30.0) -> Any:
    """Await until condition() is truthy, and return it; fail after `seconds`, saying
    what was awaited. The condition runs in a thread (it may query the database), so the
    loop, and an in-process worker on it, run meanwhile."""
    deadline = time.monotonic() + seconds
    while not (found := await asyncio.to_thread(condition)):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        await asyncio.sleep(0.02)
    return found


async def listen_session_pid(db: psycopg.Connection[Any], worker_id: str) -> int:
    """The backend pid of a worker's LISTEN session, once it listens and is idle (not
    one of its pool's connections, whose last statement may be an echo that NOTIFYs)."""
    query = ("SELECT pid FROM pg_stat_activity WHERE application_name = %s"
             " AND query LIKE '%%LISTEN %%' AND query NOT LIKE '%%pg_notify%%'"
             " AND state = 'idle'")
    name = f"pgbaton worker {worker_id}"
    row = await wait_for(lambda: db.execute(query, (name,)).fetchone(),
                         "the worker's LISTEN session")
    return int(row["pid"])


def in_client_encoding(dsn: str, encoding: str) -> str:
    """`dsn` with every connection's client_encoding set at connect (SQL_ASCII, LATIN1)."""
    return make_conninfo(dsn, options=f"-c client_encoding={encoding}")


def wait_for_lease_to_pass(db: psycopg.Connection[Any], job_id: int) -> None:
    """Sleep on the server until the job's lease is behind the server's clock.

    The wait is exactly as long as the lease has left, measured by the same clock that
    the claim and the reaper use, so the test never guesses at a duration.
    """
    db.execute(
        "SELECT pg_sleep(greatest(0, extract(epoch FROM lease_until - clock_timestamp()))"
        " + 0.001) FROM jobs WHERE id = %s",
        (job_id,),
    )
    row = db.execute("SELECT lease_until < now() AS passed FROM jobs WHERE id = %s", (job_id,))
    assert row.fetchone()["passed"]  # type: ignore[index]


def job_rows(db: psycopg.Connection[Any], *columns: str) -> list[tuple[Any, ...]]:
    """The chosen columns of every job, by id."""
    cols = ", ".join(columns)
    return [tuple(row.values()) for row in db.execute(f"SELECT {cols} FROM jobs ORDER BY id")]


class OutputLines:
    """A child process's output, read line by line on a thread of its own (a pipe read
    in the test's thread would block it, and a line buffered by readline would not wake
    a select); every line taken is kept in `seen`, for failure messages."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        stdout = process.stdout
        self.seen: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            for line in stdout:
                self._lines.put(line)
            self._lines.put(None)  # the end of the output

        threading.Thread(target=read, daemon=True).start()

    @property
    def text(self) -> str:
        return "".join(self.seen)

    def _take(self, timeout: float | None) -> str | None:
        """The next line, or None at the end of the output (for good) or of the time."""
        try:
            line = self._lines.get(timeout=timeout) if timeout else self._lines.get_nowait()
        except queue.Empty:
            return None
        if line is None:
            self._lines.put(None)  # the end stays the end for the next caller
            return None
        self.seen.append(line)
        return line

    def wait_for(self, wanted: Callable[[str], bool], timeout: float) -> str:
        """The first line from now that `wanted` accepts; AssertionError, with the output,
        at the end of the output or after timeout seconds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            line = self._take(left)
            if line is None:
                break
            if wanted(line):
                return line
        raise AssertionError(f"no such line in {timeout} s: {self.text}")

    def arrived(self) -> list[str]:
        """The lines that have come since the last look, without waiting."""
        lines = []
        while (line := self._take(None)) is not None:
            lines.append(line)
        return lines

    def rest(self, timeout: float) -> str:
        """All the output, once it ends (or after timeout seconds more)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0 and self._take(left) is not None:
            pass
        return self.text


SPAWN = multiprocessing.get_context("spawn")
PROCESS_TIMEOUT_SECONDS = 90.0


@dataclass
class Ran:
    """What processes run by run_at_once reported, and how they exited."""
    reports: list[dict[str, Any]]
    exit_codes: list[int | None]

    @property
    def errors(self) -> list[str]:
        return [r["error"] for r in self.reports if "error" in r]


def run_at_once(target: Callable[..., None], count: int, *args: Any) -> Ran:
    """Start `count` spawned processes of target(index, *args, start, reports), where
    `start` is a Barrier they meet at and `reports` a Queue each puts one dict on (with
    "error" when it failed); wait for every report, then for every exit. A process
    that never reports fails the test; one still alive at the end is killed."""
    start = SPAWN.Barrier(count)
    reports: multiprocessing.Queue[dict[str, Any]] = SPAWN.Queue()
    processes = [SPAWN.Process(target=target, args=(i, *args, start, reports))
                 for i in range(count)]
    try:
        for process in processes:
            process.start()
        results = []
        for _ in processes:
            try:
                results.append(reports.get(timeout=2 * PROCESS_TIMEOUT_SECONDS))
            except queue.Empty:
                codes = [process.exitcode for process in processes]
                raise AssertionError(
                    f"a process never reported; exit codes {codes}") from None
        for process in processes:
            process.join(timeout=PROCESS_TIMEOUT_SECONDS)
        return Ran(results, [process.exitcode for process in processes])
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()


def auto_explained(conn: psycopg.Connection[Any], *settings: str) -> list[dict[str, Any]]:
    """The plans of every statement `conn` runs from now on, nested ones too (JSON, as
    auto_explain logs them), in the list returned; the test is skipped on a server
    without auto_explain. `settings`: more auto_explain settings (log_analyze = on)."""
    plans: list[dict[str, Any]] = []
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as error:
        pytest.skip(f"auto_explain is not available on this server: {error}")
    for setting in ("auto_explain.log_min_duration = 0",
                    "auto_explain.log_nested_statements = on",
                    "auto_explain.log_format = json", "auto_explain.log_level = notice",
                    "client_min_messages = notice", *settings):
        conn.execute(f"SET {setting}")  # type: ignore[arg-type]

    def collect(diagnostic: psycopg.errors.Diagnostic) -> None:
        text = diagnostic.message_primary or ""
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1]))

    conn.add_notice_handler(collect)
    return plans


def explained_run(server_dsn: str, schema: str, name: str, params: dict[str, Any],
                  runs: int = 1) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The plans of pgbaton's named statement `name` in `schema` and of the statements
    nested in it, and its rows, from its last of `runs` runs on one connection, each
    rolled back."""
    from psycopg.rows import dict_row

    from pgbaton import _sql

    with psycopg.connect(server_dsn, autocommit=True, row_factory=dict_row) as conn:
        plans = auto_explained(conn)
        query = _sql.queries(schema)[name]
        rows: list[dict[str, Any]] = []
        for _ in range(runs):
            plans.clear()
            with conn.transaction(force_rollback=True):
                # Prepared: from the sixth run on, a generic plan may be taken (plpgsql's
                # own statements take theirs from the sixth call in the session).
                cursor = conn.execute(query, params, prepare=runs > 1)  # type: ignore[arg-type]
                rows = cursor.fetchall() if cursor.description else []
    assert plans, "auto_explain showed no plan"
    return plans, rows


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A plan's node and every node under it."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)
