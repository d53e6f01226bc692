"""Small helpers shared by the tests: waiting on the database clock, reading rows,
reading a child process's output."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg


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
