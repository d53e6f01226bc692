"""Issue 27's held-xmin cell as a bench case (case.held_xmin): what one worker keeps up
with while a session holds the xmin horizon back (docs/explanation/scaling.md, "A held
xmin").

A paced producer offers RATE jobs a second (a bulk enqueue every 50 ms), a `pgbaton
worker` process at concurrency 32 drains them, and after a warm-up a holder session
runs `BEGIN; SELECT txid_current()` and sits idle for HOLD seconds (the readers'
variant: four REPEATABLE READ sessions scanning the jobs table in a loop). Every 5 s the
case reads, from the jobs table's own timestamps, how many jobs finished in the last
5 s, how many were offered, and how long the ones started in them waited for their
claim (started_at - created_at). The issue's target, judged here as
tests/worker/processes/test_held_xmin.py judges it: during the hold every 5 s window finishes at
least 90% of what was offered in it, and no two windows in a row have a wait p99 of
1 s or more (one window past it happens without any hold: a checkpoint, a busy core).

The SQL is shared with the test (tests/worker/processes/test_held_xmin.py imports it); it
reads any jobs table with pgbaton's columns, schema-qualified.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

# The target.
DONE_FLOOR = 0.9  # completions / offered, in every window of the hold
WAIT_P99_CEILING_S = 1.0  # claim wait p99: never two windows in a row at or past it
WINDOW_S = 5.0
TICK_S = 0.05  # the producer enqueues rate * TICK_S jobs every TICK_S seconds
READERS = 4  # the readers' variant

WINDOW_SQL = """
SELECT count(*) FILTER (WHERE finished_at > clock_timestamp() - %(w)s * interval '1 s')
           AS finished,
       count(*) FILTER (WHERE created_at > clock_timestamp() - %(w)s * interval '1 s')
           AS offered,
       count(*) FILTER (WHERE status = 'pending') AS backlog,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
           FILTER (WHERE started_at > clock_timestamp() - %(w)s * interval '1 s') AS wait_p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
           FILTER (WHERE started_at > clock_timestamp() - %(w)s * interval '1 s') AS wait_p99
FROM {jobs} WHERE task = 'noop'
"""

# The same over the whole hold, between two readings of the server's clock.
SPAN_SQL = """
SELECT count(*) FILTER (WHERE finished_at > %(since)s AND finished_at <= %(until)s)
           AS finished,
       count(*) FILTER (WHERE created_at > %(since)s AND created_at <= %(until)s) AS offered,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
           FILTER (WHERE started_at > %(since)s AND started_at <= %(until)s) AS wait_p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
           FILTER (WHERE started_at > %(since)s AND started_at <= %(until)s) AS wait_p99
FROM {jobs} WHERE task = 'noop'
"""

TABLE_SQL = """
SELECT n_dead_tup AS dead, n_live_tup AS live, pg_total_relation_size(relid) AS total_bytes
FROM pg_stat_user_tables WHERE relid = %(jobs)s::regclass
"""

# Each job ran once: a claim that handed a job out twice would show an attempt past 1.
ONCE_SQL = """
SELECT count(*) AS jobs, count(*) FILTER (WHERE attempts <> 1) AS not_once
FROM {jobs} WHERE task = 'noop'
"""

NOW_SQL = "SELECT clock_timestamp() AS now"

READER_SQL = (
    "SELECT count(*), sum(length(args::text)) FROM {jobs}",
    "SELECT status, count(*) FROM {jobs} GROUP BY 1",
)


def sql(template: str, jobs: str) -> Any:
    """A statement of this module on the case's jobs table (a name of the adapter's, not
    input)."""
    return template.format(jobs=jobs)


@dataclass
class Window:
    at: float  # seconds since the producer started
    phase: str  # warmup, hold, after
    finished: int
    offered: int
    backlog: int
    wait_p50: float | None  # seconds
    wait_p99: float | None
    dead: int

    def line(self) -> str:
        p50 = "-" if self.wait_p50 is None else f"{self.wait_p50 * 1000:.0f}"
        p99 = "-" if self.wait_p99 is None else f"{self.wait_p99 * 1000:.0f}"
        return (f"{self.at:6.1f}s {self.phase:7} done/s {self.finished / WINDOW_S:7.0f} "
                f"offered/s {self.offered / WINDOW_S:7.0f} backlog {self.backlog:7d} "
                f"wait p50 {p50:>6} ms p99 {p99:>6} ms dead {self.dead}")


class PacedProducer:
    """`rate` jobs a second through the system's bulk enqueue, every `tick`, paced on the
    clock: a late tick catches up in its next enqueue rather than drifting."""

    def __init__(self, enqueue: Callable[[Sequence[int]], Awaitable[None]], rate: float,
                 tick: float = TICK_S) -> None:
        self.enqueue = enqueue
        self.rate = rate
        self.tick = tick
        self.sent = 0
        self.most_behind = 0  # the most jobs one enqueue had to catch up with
        self._stop = asyncio.Event()

    async def run(self) -> None:
        start = time.perf_counter()
        while not self._stop.is_set():
            due = int((time.perf_counter() - start) * self.rate) - self.sent
            if due > 0:
                self.most_behind = max(self.most_behind, due)
                await self.enqueue(range(self.sent, self.sent + due))
                self.sent += due
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.tick)

    def stop(self) -> None:
        self._stop.set()


@asynccontextmanager
async def idle_holder(dsn: str) -> AsyncIterator[None]:
    """The issue's holder: an xid taken, the session left idle in its transaction."""
    conn = await psycopg.AsyncConnection.connect(dsn, application_name="xmin-holder")
    try:
        await conn.execute("SELECT txid_current()")  # opens the transaction
        yield
    finally:
        await conn.rollback()
        await conn.close()


@asynccontextmanager
async def scanning_readers(dsn: str, jobs: str, count: int = READERS,
                           parallel: int | None = None) -> AsyncIterator[None]:
    """Analytics readers: REPEATABLE READ transactions scanning the jobs table over and
    over, one after the other on each session, so some snapshot is always held.
    `parallel`: the sessions' max_parallel_workers_per_gather (None: the server's). Once
    the heap passes 31 to 36 MB the planner gives each scan two parallel workers, and
    four readers become up to twelve processes wanting a core
    (docs/explanation/scaling.md, "A held xmin")."""
    stop = asyncio.Event()

    async def read() -> None:
        async with await psycopg.AsyncConnection.connect(
            dsn, application_name="xmin-reader"
        ) as conn:
            if parallel is not None:
                await conn.execute("SELECT set_config('max_parallel_workers_per_gather', "
                                   "%s, false)", (str(parallel),))
                await conn.commit()
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            while not stop.is_set():
                async with conn.transaction():
                    for statement in READER_SQL:
                        await conn.execute(sql(statement, jobs))

    tasks = [asyncio.create_task(read(), name=f"xmin reader {n}") for n in range(count)]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


class Sampler:
    """The case's reads of the jobs table, on the harness's own autocommit connection:
    a window every `window` seconds on the clock, and single rows of this module's SQL."""

    def __init__(self, db: psycopg.AsyncConnection[Any], jobs: str, window: float,
                 alive: Callable[[], None]) -> None:
        self.rows = db.cursor(row_factory=dict_row)
        self.jobs = jobs
        self.window = window
        self.alive = alive  # raises when the worker or the producer has died
        self.windows: list[Window] = []
        self.began = time.perf_counter()
        self._next = self.began + window

    async def fetch(self, template: str, params: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
        await self.rows.execute(sql(template, self.jobs), params)
        row = await self.rows.fetchone()
        assert row is not None
        return row

    def elapsed(self) -> float:
        return time.perf_counter() - self.began

    async def sample(self, phase: str) -> None:
        """Wait for the next window's end, then read it."""
        await asyncio.sleep(max(0.0, self._next - time.perf_counter()))
        self._next += self.window
        self.alive()
        row = await self.fetch(WINDOW_SQL, {"w": self.window})
        table = await self.fetch(TABLE_SQL, {"jobs": self.jobs})
        self.windows.append(Window(self.elapsed(), phase, row["finished"], row["offered"],
                                   row["backlog"], row["wait_p50"], row["wait_p99"],
                                   table["dead"]))
        print(self.windows[-1].line(), file=sys.stderr, flush=True)

    async def phase(self, phase: str, seconds: float) -> None:
        """As many windows as fit in `seconds` (at least one), on the window clock: a
        phase that starts right after a window is that many windows long, not one more
        when a reading ends a few milliseconds late."""
        for _ in range(max(1, round(seconds / self.window))):
            await self.sample(phase)


def metrics(span: dict[str, Any], end_of_hold: dict[str, Any],
            windows: Sequence[Window], hold_seconds: float) -> dict[str, float]:
    """The run's figures: the whole hold (`span`, SPAN_SQL's row), its worst windows,
    the table at the end of the hold. One the run could not measure (no job offered or
    started in the hold) is left out."""
    verdict = judge(windows)

    def ms(seconds: float | None) -> float | None:
        return None if seconds is None else seconds * 1000

    figures = {
        "offered_per_s": span["offered"] / hold_seconds,
        "hold_done_ratio": span["finished"] / span["offered"] if span["offered"] else None,
        "hold_done_ratio_min": verdict["done_ratio_min"],
        "hold_wait_p50_ms": ms(span["wait_p50"]),
        "hold_wait_p99_ms": ms(span["wait_p99"]),
        "hold_wait_p99_max_ms": ms(verdict["wait_p99_max_s"]),
        "hold_wait_p99_streak": verdict["wait_p99_streak"],
        "dead_tuples_end": end_of_hold["dead"],
        "table_mb_end": end_of_hold["total_bytes"] / 1024**2,
    }
    return {key: value for key, value in figures.items() if value is not None}


def longest_streak(flags: Sequence[bool]) -> int:
    """The most True values in a row."""
    longest = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        longest = max(longest, run)
    return longest


def judge(windows: Sequence[Window]) -> dict[str, Any]:
    """The hold's windows against the issue's target: the worst completion ratio, the
    worst wait p99, and the longest run of windows whose wait p99 is at or past the
    ceiling (a window with offered jobs and no start at all counts as past it)."""
    held = [w for w in windows if w.phase == "hold"]
    ratios = [w.finished / w.offered for w in held if w.offered]
    p99s = [w.wait_p99 for w in held if w.wait_p99 is not None]
    over = [(w.wait_p99 is None and w.offered > 0)
            or (w.wait_p99 is not None and w.wait_p99 >= WAIT_P99_CEILING_S) for w in held]
    streak = longest_streak(over)
    worst = min(ratios) if ratios else None
    return {
        "windows": len(held),
        "done_ratio_min": worst,
        "wait_p99_max_s": max(p99s) if p99s else None,
        "wait_p99_streak": streak,
        "done_met": worst is not None and worst >= DONE_FLOOR,
        "wait_met": bool(held) and streak < 2,
    }


def windows_info(windows: Sequence[Window]) -> list[dict[str, Any]]:
    """The windows for the JSON, rounded."""
    out = []
    for w in windows:
        row = asdict(w)
        row["at"] = round(w.at, 1)
        for key in ("wait_p50", "wait_p99"):
            row[key] = None if row[key] is None else round(row[key], 4)
        out.append(row)
    return out
