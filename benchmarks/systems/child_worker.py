"""A worker that runs in processes of its own (Graphile Worker's Node.js runner, pgbaton
--processes N): started as a command whose standard output carries one
"seq monotonic-nanoseconds" line per handler start, which feed the harness's PROBE."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Mapping
from pathlib import Path

import psutil

from ..common import read_starts, tree_rss_bytes

STOP_SECONDS = 30.0


class ChildWorker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.process: asyncio.subprocess.Process | None = None
        self._starts: asyncio.Task[None] | None = None

    def follow_starts(self) -> asyncio.Task[None]:
        """Read its handler starts in the background, until finish(); the task ends
        early if the worker dies (System.check_worker watches it)."""
        self._starts = asyncio.create_task(self.read_starts(), name=f"{self.name} starts")
        return self._starts

    async def finish(self) -> None:
        """Stop it and wait for the last of its starts (raises if it failed)."""
        assert self._starts is not None
        self.stop()
        await self._starts

    async def start(self, command: list[str], cwd: Path, env: Mapping[str, str]) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *command, cwd=cwd, env=dict(env), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, limit=16 * 1024 * 1024,
        )

    async def readline(self) -> bytes:
        assert self.process is not None and self.process.stdout is not None
        return await self.process.stdout.readline()

    async def read_starts(self) -> None:
        """Until the worker's standard output closes (every one of its processes ended);
        raises if it did not exit cleanly."""
        assert self.process is not None and self.process.stdout is not None
        await read_starts(self.process.stdout)
        if await self.process.wait() != 0:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}")

    def stop(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def rss(self) -> int:
        """The worker's memory: its process and every process it started (0 before it
        starts)."""
        return 0 if self.process is None else tree_rss_bytes(self.process.pid)

    def cpu_seconds(self) -> float:
        """CPU time (user and system) of the worker's processes so far (0 before it
        starts)."""
        if self.process is None:
            return 0.0
        root = psutil.Process(self.process.pid)
        total = 0.0
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system
        return total

    async def close(self) -> None:
        """Make sure that nothing the worker started outlives the run."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        descendants: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            descendants = psutil.Process(process.pid).children(recursive=True)
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()
        for child in descendants:
            with contextlib.suppress(psutil.Error):
                child.kill()


class ChildWorkerMethods:
    """The System methods of a system whose worker is a ChildWorker (self.child)."""

    child: ChildWorker

    def worker_rss(self) -> int:
        return self.child.rss()

    def worker_cpu_seconds(self) -> float:
        return self.child.cpu_seconds()

    async def stop_worker(self) -> None:
        await self.child.finish()
