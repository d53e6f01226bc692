"""Graphile Worker (Node.js): its own runner in a child process, jobs added through its
SQL API (`graphile_worker.add_job` and `add_jobs`), as its documentation allows for
producers in other languages.

Two configurations, as Graphile Worker's performance guide describes them: its defaults
(A), and its throughput options (B: a local queue that locks 500 jobs at a time, and
completions batched with no delay). The worker (benchmarks/graphile/worker.mjs) reports
each handler start on stdout with a CLOCK_MONOTONIC timestamp, the clock of this
process's time.perf_counter(), so drain and latency are timed as for the Python systems.
The worker's memory is the Node process's.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import psycopg

from .base import System
from .child_worker import ChildWorker, ChildWorkerMethods

NODE_PROJECT = Path(__file__).resolve().parents[1] / "graphile"
PACKAGE = NODE_PROJECT / "node_modules" / "graphile-worker"
STARTUP_SECONDS = 60.0

if shutil.which("node") is None or not PACKAGE.is_dir():
    # benchmarks/setup_venv.sh runs `npm ci` there when Node and npm are installed.
    raise ImportError(f"Graphile Worker is not installed in {NODE_PROJECT} (npm ci there)")


class GraphileSystem(ChildWorkerMethods, System):
    distribution = None
    python = False
    tuned: ClassVar[bool] = False
    unfinished_sql = "SELECT count(*) FROM graphile_worker._private_jobs"

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.producer: psycopg.AsyncConnection[Any] | None = None
        self.child = ChildWorker("Graphile Worker")

    @classmethod
    def installed_version(cls) -> str | None:
        return str(json.loads((PACKAGE / "package.json").read_text())["version"])

    async def install(self) -> None:
        process = await asyncio.create_subprocess_exec(
            str(NODE_PROJECT / "node_modules" / ".bin" / "graphile-worker"),
            "--connection", self.dsn, "--schema-only",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"graphile-worker --schema-only failed: {output.decode()[-400:]}")

    async def connect(self) -> None:
        self.producer = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def close(self) -> None:
        await self.child.close()
        if self.producer is not None:
            await self.producer.close()
        await super().close()

    async def enqueue_one(self, seq: int) -> None:
        assert self.producer is not None
        await self.producer.execute(
            "SELECT graphile_worker.add_job('noop', json_build_object('seq', %s::int))", (seq,)
        )

    async def enqueue_batch(self, seqs: Sequence[int]) -> None:
        assert self.producer is not None
        await self.producer.execute(
            """
            SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
                SELECT ROW('noop', json_build_object('seq', s), NULL, NULL, NULL, NULL,
                           NULL, NULL)::graphile_worker.job_spec
                FROM unnest(%s::int[]) AS s))
            """,
            (list(seqs),),
        )

    async def start_worker(self, concurrency: int) -> None:
        env = {
            **os.environ,
            "GRAPHILE_DSN": self.dsn,
            "GRAPHILE_CONCURRENCY": str(concurrency),
            "GRAPHILE_TUNED": "1" if self.tuned else "0",
        }
        await self.child.start(["node", str(NODE_PROJECT / "worker.mjs")], NODE_PROJECT, env)
        line = await asyncio.wait_for(self.child.readline(), STARTUP_SECONDS)
        if line.strip() != b"READY":
            raise RuntimeError(f"Graphile Worker did not start: {line!r}")
        self.worker_task = self.child.follow_starts()



class GraphileDefaults(GraphileSystem):
    name = "graphile"
    label = "Graphile Worker"
    concurrency_meaning = (
        "run({concurrency: N}): one Node.js process, one pool, at most N jobs in flight; "
        "each job fetched in its own round trip and completed on its own."
    )
    settings = (
        "Graphile Worker's defaults (no local queue, completions not batched, poll interval "
        "2 s, LISTEN/NOTIFY); jobs added through graphile_worker.add_job / add_jobs."
    )


class GraphileTuned(GraphileSystem):
    name = "graphile_b"
    label = "Graphile Worker, tuned"
    tuned = True
    concurrency_meaning = GraphileDefaults.concurrency_meaning.replace(
        "each job fetched in its own round trip and completed on its own",
        "jobs fetched 500 at a time into a local queue, completions batched",
    )
    settings = (
        "The throughput options of Graphile Worker's performance guide: localQueue.size "
        "500, completeJobBatchDelay 0 and failJobBatchDelay 0; otherwise as its defaults."
    )
    # Enqueue does not depend on the worker's options: `graphile` measures it.
    cases: ClassVar[frozenset[str]] = frozenset({"drain", "latency"})
