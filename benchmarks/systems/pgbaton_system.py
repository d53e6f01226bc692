"""pgbaton, driven through its public App/Task API and its real Worker."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pgbaton
from pgbaton.worker import Worker, WorkerConfig

from .. import base_tree
from ..common import PROBE, REPORT_STARTS_ENV
from .base import ALL_CASES, FLOW_CASES, HELD_XMIN_CASES, System, T
from .child_worker import ChildWorker, ChildWorkerMethods

SCHEMA = "pgbaton"
FILL_CHUNK = 1_000_000
ROOT = Path(__file__).resolve().parents[2]

app = pgbaton.App(schema=SCHEMA)


@app.task(name="noop")
async def noop(seq: int) -> None:
    PROBE.hit(seq)


class PgbatonSystem(System):
    name = "pgbaton"
    label = "pgbaton"
    distribution = "pgbaton"
    role = "subject"
    concurrency_meaning = (
        "WorkerConfig(concurrency=N): one worker process, one asyncio loop, at most N "
        "handlers in flight; each claim asks for the free slots and, at the defaults "
        "since 2026-12-07 (claim_ahead 'auto'; before, 0), the jobs it claims ahead."
    )
    settings = (
        "WorkerConfig defaults (lease 30 s, poll_interval 2 s, maintenance on, processes=1) "
        "apart from concurrency; enqueue through Task.enqueue_async, bulk through "
        "AsyncQueue.enqueue_many."
    )
    cases: ClassVar[frozenset[str]] = ALL_CASES | FLOW_CASES | HELD_XMIN_CASES
    unfinished_sql = (
        f"SELECT count(*) FROM {SCHEMA}.jobs WHERE status IN ('pending', 'running')"
    )
    jobs_table = f"{SCHEMA}.jobs"

    @classmethod
    def run_on_own_loop(cls, main: Coroutine[Any, Any, T]) -> T:
        """`pgbaton worker` runs on the loop its `--loop auto` picks (uvloop where it is
        installed, pgbaton/worker/loop.py). pgbaton at a --base ref older than that
        choice ran on asyncio's own, as this does when the module is missing."""
        try:
            from pgbaton.worker.loop import run
        except ImportError:
            return super().run_on_own_loop(main)
        return run(main, "auto")

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.worker: Worker | None = None
        self.queue: pgbaton.AsyncQueue | None = None
        # `pgbaton worker` in processes of its own (start_worker_process), once started.
        self.child = ChildWorker("pgbaton worker")

    @classmethod
    def source(cls) -> dict[str, str]:
        return {"pgbaton_file": pgbaton.__file__ or ""}

    async def install(self) -> None:
        await pgbaton.AsyncQueue(self.dsn, schema=SCHEMA).migrate()

    async def connect(self) -> None:
        app.configure(dsn=self.dsn, schema=SCHEMA)
        await app.async_queue.open()

    async def close(self) -> None:
        await self.child.close()
        await app.async_queue.close()
        if self.queue is not None:
            await self.queue.close()
        await super().close()

    async def enqueue_one(self, seq: int) -> None:
        await noop.enqueue_async({"seq": seq})

    async def enqueue_batch(self, seqs: Sequence[int]) -> None:
        await app.async_queue.enqueue_many([{"task": "noop", "args": {"seq": s}} for s in seqs])

    async def start_worker(self, concurrency: int) -> None:
        self.worker = Worker(app, WorkerConfig(concurrency=concurrency, dsn=self.dsn))
        self.worker_task = asyncio.create_task(self.worker.run(), name="pgbaton worker")

    async def stop_worker(self) -> None:
        assert self.worker is not None and self.worker_task is not None
        self.worker.request_stop()
        await self.worker_task

    async def start_worker_process(
        self, concurrency: int, processes: int = 1, claim_ahead: int | str | None = None
    ) -> None:
        """`pgbaton worker` on this module's App, as an operator runs it: its defaults
        apart from the options given (claim_ahead None: the default, not passed). It
        imports the pgbaton this process imports (the same PYTHONPATH)."""
        command = [
            sys.executable, "-m", "pgbaton", "worker", f"{__name__}:app",
            "--dsn", self.dsn, "--schema", SCHEMA, "--processes", str(processes),
            "--concurrency", str(concurrency), "--log-level", "WARNING",
        ]
        if claim_ahead is not None:
            command += ["--claim-ahead", str(claim_ahead)]
        self.child = ChildWorker(f"pgbaton worker --processes {processes}")
        # The worker processes inherit the supervisor's standard output: their handlers
        # write their starts there (common.Probe in reporting mode).
        await self.child.start(command, ROOT, {**os.environ, REPORT_STARTS_ENV: "stdout"})
        self.worker_task = self.child.follow_starts()

    async def stop_worker_process(self) -> None:
        await self.child.finish()

    async def fill_done(self, rows: int) -> None:
        assert self.db is not None
        for start in range(1, rows + 1, FILL_CHUNK):
            end = min(start + FILL_CHUNK - 1, rows)
            await self.db.execute(
                f"""
                INSERT INTO {SCHEMA}.jobs (queue, task, args, status, attempts, run_at,
                                           worker_id, created_at, started_at, finished_at)
                SELECT 'default', 'noop', jsonb_build_object('seq', g), 'done', 1, t,
                       'filler', t, t, t
                FROM generate_series(%(start)s::bigint, %(end)s::bigint) AS g,
                     LATERAL (SELECT now() - make_interval(secs => (%(rows)s - g) / 1000.0)
                              AS t) AS times
                """,  # type: ignore[arg-type]
                {"start": start, "end": end, "rows": rows},
            )

    async def fill_blocked(self, rows: int) -> None:
        # The queue is paused even with no row in it, so that both claim_blocked runs
        # take the flow claim and differ only in the jobs waiting behind the pause.
        await app.async_queue.pause("blocked")
        assert self.db is not None
        await self.db.execute(
            f"INSERT INTO {SCHEMA}.jobs (queue, task, priority, args)"  # type: ignore[arg-type]
            " SELECT 'blocked', 'noop', 10, jsonb_build_object('seq', -g)"
            " FROM generate_series(1, %(rows)s) AS g",
            {"rows": rows},
        )

    async def limit_queue(self, concurrency: int) -> None:
        await app.async_queue.set_concurrency("default", concurrency)

    async def claim_one(self) -> int:
        if self.queue is None:
            self.queue = pgbaton.AsyncQueue(self.dsn, schema=SCHEMA)
            await self.queue.open()
        return len(await self.queue.claim("bench", limit=1))

    async def table_bytes(self) -> int:
        assert self.db is not None
        cursor = await self.db.execute(
            f"SELECT pg_total_relation_size('{SCHEMA}.jobs')"  # type: ignore[arg-type]
        )
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


def _no_op(event: pgbaton.Event) -> None:
    pass


class PgbatonSubscribedSystem(PgbatonSystem):
    """pgbaton with one no-op subscriber on every event: what the events API costs."""

    name = "pgbaton_sub"
    label = "pgbaton + 1 subscriber"
    role = "variant"
    settings = PgbatonSystem.settings + " One no-op subscriber on every event (App.subscribe)."
    cases: ClassVar[frozenset[str]] = frozenset({"drain"})

    async def start_worker(self, concurrency: int) -> None:
        if _no_op not in [s for s, _ in app.events._subscribers]:
            app.subscribe(_no_op)
        await super().start_worker(concurrency)


class PgbatonOnAsyncio(PgbatonSystem):
    """pgbaton at its defaults but on asyncio's own event loop (`pgbaton worker --loop
    asyncio`): what uvloop, the default loop, is worth."""

    name = "pgbaton_asyncio"
    label = "pgbaton, asyncio's loop"
    role = "variant"
    settings = PgbatonSystem.settings + " On asyncio's own event loop (--loop asyncio)."
    cases: ClassVar[frozenset[str]] = frozenset({"drain", "latency"})

    @classmethod
    def run_on_own_loop(cls, main: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(main)


class PgbatonLimitedSystem(PgbatonSystem):
    """pgbaton with a fleet-wide concurrency limit of 8 on the drained queue: what the
    flow claim (a lock on the queue's row per claim, counts after it) costs."""

    name = "pgbaton_limit8"
    label = "pgbaton, queue limit 8"
    role = "variant"
    settings = PgbatonSystem.settings + " Queue 'default' limited to 8 (set_concurrency)."
    cases: ClassVar[frozenset[str]] = frozenset({"drain"})

    async def start_worker(self, concurrency: int) -> None:
        await app.async_queue.set_concurrency("default", 8)
        await super().start_worker(concurrency)


class PgbatonClaimingAhead(PgbatonSystem):
    """pgbaton with its drain option for many short jobs: claim_ahead=500, as Graphile
    Worker's tuned configuration keeps a local queue of 500."""

    name = "pgbaton_b"
    label = "pgbaton, claiming ahead"
    role = "option"
    settings = PgbatonSystem.settings + (
        " WorkerConfig(claim_ahead=500): up to 500 jobs claimed beyond the free slots, "
        "waiting in the worker for one (docs/explanation/architecture.md, \"Claiming ahead\")."
    )
    cases: ClassVar[frozenset[str]] = frozenset({"drain", "latency"})

    async def start_worker(self, concurrency: int) -> None:
        self.worker = Worker(
            app, WorkerConfig(concurrency=concurrency, claim_ahead=500, dsn=self.dsn)
        )
        self.worker_task = asyncio.create_task(self.worker.run(), name="pgbaton worker")


class PgbatonClaimingAheadAuto(PgbatonSystem):
    """pgbaton claiming ahead as the worker sizes it (claim_ahead="auto",
    docs/explanation/architecture.md "Claiming ahead sized by the worker")."""

    name = "pgbaton_auto"
    label = "pgbaton, claiming ahead (auto)"
    role = "option"
    settings = PgbatonSystem.settings + " WorkerConfig(claim_ahead=\"auto\")."
    cases: ClassVar[frozenset[str]] = frozenset({"drain", "latency"}) | HELD_XMIN_CASES

    async def start_worker(self, concurrency: int) -> None:
        self.worker = Worker(
            app, WorkerConfig(concurrency=concurrency, claim_ahead="auto", dsn=self.dsn)
        )
        self.worker_task = asyncio.create_task(self.worker.run(), name="pgbaton worker")

    async def start_worker_process(
        self, concurrency: int, processes: int = 1, claim_ahead: int | str | None = "auto"
    ) -> None:
        await super().start_worker_process(concurrency, processes, claim_ahead)


class PgbatonProcesses(ChildWorkerMethods, PgbatonSystem):
    """pgbaton as `pgbaton worker --processes 2` runs it: a supervisor and two worker
    processes, each with its own asyncio loop, splitting concurrency N between them."""

    name = "pgbaton_p2"
    label = "pgbaton, 2 processes"
    role = "option"
    processes: ClassVar[int] = 2
    claim_ahead: ClassVar[int | None] = None
    concurrency_meaning = (
        "`pgbaton worker --processes 2 --concurrency ceil(N/2)`: a supervisor and two "
        "worker processes, each one asyncio loop with ceil(N/2) handler slots, so N "
        "handlers in flight in all (2 at N = 1); each claim asks for its process's free "
        "slots. Handler starts are timed on CLOCK_MONOTONIC in the worker processes; "
        "memory is the supervisor's and both workers' RSS added up."
    )
    settings = (
        "the `pgbaton worker` command's defaults (as WorkerConfig's: lease 30 s, "
        "poll_interval 2 s, maintenance on) apart from --processes and --concurrency, "
        "started from this module's App; enqueue through Task.enqueue_async in the "
        "harness's process."
    )
    cases: ClassVar[frozenset[str]] = frozenset({"drain", "latency"})

    async def start_worker(self, concurrency: int) -> None:
        per_process = -(-concurrency // self.processes)
        await self.start_worker_process(per_process, self.processes, self.claim_ahead)


class PgbatonFourProcesses(PgbatonProcesses):
    """The same at four processes: how the drain scales with processes on this machine
    (one, two and four, beside the concurrencies)."""

    name = "pgbaton_p4"
    label = "pgbaton, 4 processes"
    processes = 4
    concurrency_meaning = PgbatonProcesses.concurrency_meaning.replace(
        "--processes 2 --concurrency ceil(N/2)", "--processes 4 --concurrency ceil(N/4)"
    ).replace("two worker", "four worker").replace("ceil(N/2) handler", "ceil(N/4) handler"
    ).replace("(2 at N = 1)", "(4 at N = 1)").replace("both workers'", "the workers'")
    cases: ClassVar[frozenset[str]] = frozenset({"drain"})


class PgbatonProcessesClaimingAhead(PgbatonProcesses):
    name = "pgbaton_b_p2"
    label = "pgbaton, 2 processes claiming ahead"
    claim_ahead = 500
    settings = PgbatonProcesses.settings + (
        " --claim-ahead 500 in each process: up to 500 jobs claimed beyond its free slots "
        "(as pgbaton_b)."
    )


class AtTheBase:
    """pgbaton at the --base ref (benchmarks/base_tree.py): the same adapter, run in a
    process that imports the base's pgbaton. Every run checks that it does."""

    role = "base"

    @classmethod
    def source(cls) -> dict[str, str]:
        return base_tree.verify_import(pgbaton.__file__ or "")

    @classmethod
    def installed_version(cls) -> str | None:
        return f"at {os.environ.get(base_tree.BASE_COMMIT_ENV, '?')[:10]}"


class PgbatonAtBase(AtTheBase, PgbatonSystem):
    name = "pgbaton_base"
    label = "pgbaton at the base"
    base_of = "pgbaton"
    settings = PgbatonSystem.settings + " The base ref's pgbaton (--base)."
    cases: ClassVar[frozenset[str]] = frozenset(
        {"enqueue_single", "enqueue_bulk", "drain", "latency"}) | HELD_XMIN_CASES


class PgbatonAtBaseClaimingAhead(AtTheBase, PgbatonClaimingAhead):
    name = "pgbaton_base_b"
    label = "pgbaton at the base, claiming ahead"
    base_of = "pgbaton_b"
    settings = PgbatonClaimingAhead.settings + " The base ref's pgbaton (--base)."
