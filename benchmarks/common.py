"""What every part of the harness shares: the server, fresh databases, the probe that the
no-op handlers report to, RSS sampling and the statistics of repeated runs."""

from __future__ import annotations

import asyncio
import math
import os
import select
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil
import psycopg
from psycopg.conninfo import conninfo_to_dict

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
DATABASE_PREFIX = "pgbaton_bench_"
# Set in the environment of a worker that runs in other processes (pgbaton --processes):
# its handlers then report their starts on standard output instead of to this process.
REPORT_STARTS_ENV = "PGBATON_BENCH_REPORT_STARTS"


# -- what the server spends: CPU of its backends and WAL ---------------------------------

TICKS = os.sysconf("SC_CLK_TCK")


class ServerReading:
    """The CPU seconds of each backend of this database (but the reader's own) and the
    server's WAL position, at one moment. The CPU comes from /proc: the server must run on
    this machine (else no backend is read and the CPU figures are 0). WAL is the whole
    server's: the bench wants a quiet machine anyway."""

    def __init__(self, cpu: dict[int, float], wal: int) -> None:
        self.cpu = cpu
        self.wal = wal

    @classmethod
    async def take(cls, db: psycopg.AsyncConnection[Any] | None) -> ServerReading:
        assert db is not None, "the system is not open"
        cursor = await db.execute(
            "SELECT pid, pg_current_wal_lsn() - '0/0'::pg_lsn FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        rows = await cursor.fetchall()
        if not rows:  # nothing else connected: the WAL position alone
            cursor = await db.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
            row = await cursor.fetchone()
            assert row is not None
            return cls({}, int(row[0]))
        cpu: dict[int, float] = {}
        for pid, _ in rows:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            cpu[pid] = (int(fields[11]) + int(fields[12])) / TICKS
        return cls(cpu, int(rows[0][1]))

    def since(self, before: ServerReading) -> tuple[float, int]:
        """CPU seconds and WAL bytes from `before` to this reading (a backend opened in
        between counts whole; one closed in between is lost, so read before stopping)."""
        cpu = sum(seconds - before.cpu.get(pid, 0.0) for pid, seconds in self.cpu.items())
        return cpu, self.wal - before.wal


# -- the server and one fresh database per case ------------------------------------------


def find_server(explicit: str | None = None) -> tuple[str, Any, str]:
    """(DSN, embedded server handle or None, how it was chosen).

    The DSN is --dsn, else PGBATON_BENCH_DSN, else the local default; when that server
    cannot be reached the embedded PostgreSQL of pgbaton is started instead. The caller
    keeps the handle alive for as long as the server is needed.
    """
    dsn = explicit or os.environ.get("PGBATON_BENCH_DSN") or DEFAULT_DSN
    try:
        psycopg.connect(dsn, connect_timeout=3, autocommit=True).close()
    except psycopg.OperationalError as error:
        from pgbaton import embedded

        # A folder of its own, deleted at the end: never stop or fill a server that
        # someone else's pgbaton commands are using.
        folder = Path(tempfile.gettempdir()) / f"pgbaton-bench-pg-{os.getpid()}"
        server = embedded.start(folder, delete_on_exit=True)
        reason = " ".join(str(error).split())[:160]
        return embedded.dsn(server), server, f"embedded server ({dsn} unreachable: {reason})"
    return dsn, None, dsn


def database_url(server_dsn: str, dbname: str) -> str:
    """A postgresql:// URL for dbname on the server: the one form that psycopg, asyncpg and
    sqlx (awa) all accept."""
    params = conninfo_to_dict(server_dsn)
    user = quote(str(params.get("user", "postgres")), safe="")
    password = params.get("password")
    credentials = user + (":" + quote(str(password), safe="") if password else "")
    host = str(params.get("host", "127.0.0.1"))
    port = str(params.get("port", "5432"))
    if host.startswith("/"):
        # A socket folder cannot sit in the authority part of a URL.
        return f"postgresql://{credentials}@/{dbname}?host={quote(host, safe='')}&port={port}"
    return f"postgresql://{credentials}@{host}:{port}/{dbname}"


def database_name(label: str) -> str:
    # The harness's pid is in the name, so a later run drops only what a dead run left.
    return f"{DATABASE_PREFIX}{os.getpid()}_{label}_{uuid.uuid4().hex[:8]}".lower()


def create_database(server_dsn: str, name: str, template: str = "template0") -> str:
    """CREATE DATABASE name as a copy of template; returns its URL."""
    statement = f'CREATE DATABASE "{name}" TEMPLATE "{template}"'
    for attempt in range(50):
        try:
            with psycopg.connect(server_dsn, autocommit=True) as conn:
                conn.execute(statement)  # type: ignore[arg-type]
            break
        except psycopg.errors.ObjectInUse:
            # The template's last client has disconnected but its backend may not have
            # exited yet; PostgreSQL refuses to copy a database that has a session.
            if attempt == 49:
                raise
            time.sleep(0.1)
    return database_url(server_dsn, name)


def drop_database(server_dsn: str, name: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


@contextmanager
def fresh_database(server_dsn: str, label: str, template: str = "template0") -> Iterator[str]:
    """A new database for one run, copied from template, dropped afterwards; yields its
    URL."""
    name = database_name(label)
    url = create_database(server_dsn, name, template)
    try:
        yield url
    finally:
        drop_database(server_dsn, name)


def drop_leftover_databases(server_dsn: str) -> list[str]:
    """Drop the databases of an earlier run that was killed before it could clean up:
    those whose harness process is gone. A run still going, here or beside this one,
    keeps its databases."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s",
                (DATABASE_PREFIX + "%",),
            )
        ]
    left = [name for name in names if not _run_alive(name)]
    for name in left:
        drop_database(server_dsn, name)
    return left


def _run_alive(database: str) -> bool:
    pid = database.removeprefix(DATABASE_PREFIX).split("_", 1)[0]
    if not pid.isdigit():
        return False  # named before runs carried their pid
    return pid_alive(int(pid))


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (someone else's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def server_facts(server_dsn: str) -> dict[str, Any]:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        facts: dict[str, Any] = {}
        for setting in ("server_version", "shared_buffers", "max_connections",
                        "synchronous_commit", "fsync"):
            row = conn.execute(f"SHOW {setting}").fetchone()  # type: ignore[arg-type]
            facts[setting] = row[0] if row else None
        return facts


# -- the probe: what the no-op handlers report -------------------------------------------


class Probe:
    """Each no-op handler calls hit(seq) first thing; the harness reads when each job
    started, how many ran, and whether any ran twice.

    Handlers may run on the event loop or (for a system that dispatches elsewhere) on
    another thread, so waking the waiter goes through call_soon_threadsafe when needed.

    In a worker process that the harness started (REPORT_STARTS_ENV set), hit() writes
    "seq monotonic-nanoseconds" lines to standard output instead, once per turn of the
    event loop, for read_starts() in the harness. time.perf_counter() is CLOCK_MONOTONIC
    on Linux, one clock for every process of the machine, so those starts are on the
    harness's clock.
    """

    def __init__(self) -> None:
        self.reporting = os.environ.get(REPORT_STARTS_ENV) == "stdout"
        self._lines: list[str] = []
        self.started: dict[int, float] = {}
        self.hits = 0
        self.duplicates = 0
        self.first: float | None = None
        self.last: float | None = None
        # For a worker of several processes: when each one (by pid) started its first job.
        self.first_by_process: dict[int, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._target: int | None = None
        self._reached: asyncio.Event | None = None

    def reset(self) -> None:
        self.started.clear()
        self.hits = self.duplicates = 0
        self.first = self.last = None
        self.first_by_process.clear()

    def hit(self, seq: int, at: float | None = None, process: int | None = None) -> None:
        """A handler started job `seq`, now or `at` (a perf_counter() reading: a worker
        in another process reports its starts on the same monotonic clock), in this
        process or in the worker process `process` (a pid)."""
        if self.reporting:
            self._report(seq)
            return
        now = time.perf_counter() if at is None else at
        if seq in self.started:
            self.duplicates += 1
        else:
            self.started[seq] = now
        self.hits += 1
        if process is not None:
            self.first_by_process.setdefault(process, now)
        if self.first is None:
            self.first = now
        self.last = now
        if self._target is not None and len(self.started) >= self._target:
            self._signal()

    def _report(self, seq: int) -> None:
        self._lines.append(f"{seq} {time.perf_counter_ns()} {os.getpid()}\n")
        if len(self._lines) == 1:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Write the lines waiting, in writes of at most PIPE_BUF bytes that end on a line:
        such a write to a pipe is atomic, so the lines of two worker processes sharing
        the harness's pipe never mix."""
        lines, self._lines = self._lines, []
        chunk = ""
        for line in lines:
            if len(chunk) + len(line) > select.PIPE_BUF:
                _write_all(chunk.encode())
                chunk = ""
            chunk += line
        if chunk:
            _write_all(chunk.encode())

    def _signal(self) -> None:
        event, loop = self._reached, self._loop
        if event is None or loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)

    async def wait_started(self, count: int, timeout: float, alive: Any = None) -> None:
        """Until `count` distinct jobs have started; `alive()` may raise to stop early
        (the worker died)."""
        self._loop = asyncio.get_running_loop()
        self._reached = asyncio.Event()
        self._target = count
        deadline = time.perf_counter() + timeout
        try:
            while len(self.started) < count:
                if alive is not None:
                    alive()
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    raise TimeoutError(
                        f"only {len(self.started)} of {count} jobs started in {timeout:.0f} s"
                    )
                try:
                    await asyncio.wait_for(self._reached.wait(), min(remaining, 0.5))
                except TimeoutError:
                    continue
        finally:
            self._target = None


PROBE = Probe()


def _write_all(data: bytes) -> None:
    while data:
        data = data[os.write(1, data):]


async def read_starts(stream: asyncio.StreamReader) -> None:
    """Feed PROBE the "seq monotonic-nanoseconds [pid]" lines of a worker in other
    processes (Graphile Worker's task; a Probe in reporting mode adds its pid) until the
    stream ends."""
    async for line in stream:
        seq, nanoseconds, *pid = line.split()
        PROBE.hit(int(seq), at=int(nanoseconds) / 1e9,
                  process=int(pid[0]) if pid else None)


# -- memory -------------------------------------------------------------------------------


def rss_bytes(pid: int | None = None) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def tree_rss_bytes(pid: int) -> int:
    """The resident set sizes of a process and of all its descendants, added up (the
    shared libraries each one maps count once per process, as `ps` shows them)."""
    root = psutil.Process(pid)
    total = 0
    for process in [root, *root.children(recursive=True)]:
        with suppress(psutil.Error):  # a child that ended between the listing and now
            total += process.memory_info().rss
    return total


class RssSampler:
    """The peak resident set size of the worker, sampled on a thread while it runs:
    measure() is this process's RSS, or that of the worker's own processes."""

    def __init__(self, measure: Callable[[], int] = rss_bytes, interval: float = 0.05) -> None:
        self.interval = interval
        self.measure = measure
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        # A worker process that has ended (or not started yet) has nothing to sample.
        with suppress(psutil.Error):
            self.peak = max(self.peak, self.measure())


# -- statistics ----------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 100 values is the 99th smallest)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median and spread of the repeats of one measurement."""
    ordered = sorted(values)
    median = statistics.median(ordered)
    spread = (ordered[-1] - ordered[0]) / median * 100 if median else 0.0
    return {
        "median": median,
        "min": ordered[0],
        "max": ordered[-1],
        "spread_pct": spread,
        "n": len(ordered),
        "values": list(values),
    }
