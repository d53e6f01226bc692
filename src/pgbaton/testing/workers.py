"""A real worker beside a test: in a thread of its own, or as a task on the test's loop.

`App.run_worker` is for a process's main thread: it installs signal handlers and waits
for a signal. A test needs a worker it can start and stop itself, from any thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Self

from ..app import App
from ..errors import PgbatonError
from ..events import Event
from ..worker import Worker, WorkerConfig

START_TIMEOUT_SECONDS = 30.0


class WorkerThread:
    """A Worker for `app` running on its own event loop in a background thread:

        with WorkerThread(app, concurrency=4) as worker:
            ...          # enqueue; the worker runs the jobs
        worker.exit_status

    Options are WorkerConfig's fields (maintenance=False unless given, so no reaper or
    periodic schedule runs behind the test's back). start() returns once the worker
    claims; stop() stops it as SIGTERM would and waits for it.
    """

    def __init__(self, app: App, config: WorkerConfig | None = None, **options: Any) -> None:
        self.app = app
        self.config = config or WorkerConfig(**{"maintenance": False, **options})
        self.worker: Worker | None = None
        self.exit_status: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._main, name="pgbaton-worker", daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self, timeout: float = START_TIMEOUT_SECONDS) -> Self:
        self._thread.start()
        if not self._started.wait(timeout) or self._error is not None:
            self.stop()
            raise PgbatonError(f"the worker did not start within {timeout:g} s") \
                from self._error
        return self

    def stop(self, timeout: float | None = 60.0) -> int:
        """Stop claiming, let running jobs finish (the config's shutdown_grace), wait."""
        if self._loop is not None and self.worker is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.worker.request_stop)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise PgbatonError(f"the worker thread did not stop within {timeout} s")
        if self._error is not None:
            raise PgbatonError(f"the worker failed: {self._error}") from self._error
        return self.exit_status if self.exit_status is not None else 1

    def _main(self) -> None:
        try:
            self.exit_status = asyncio.run(self._run())
        except BaseException as error:
            self._error = error
        finally:
            self._started.set()

    async def _run(self) -> int:
        self._loop = asyncio.get_running_loop()
        self.worker = Worker(self.app, self.config)
        return await _run_until_started(self.worker, self._started.set)


async def _run_until_started(worker: Worker, on_started: Any) -> int:
    def started(event: Event) -> None:
        if event.worker_id == worker.worker_id:
            on_started()

    worker.events.subscribe(started, ["worker.started"])
    try:
        return await worker.run()
    finally:
        worker.events.unsubscribe(started)


@asynccontextmanager
async def worker_task(
    app: App, config: WorkerConfig | None = None, **options: Any
) -> AsyncIterator[Worker]:
    """A Worker for `app` as a task on the running event loop, for an async test:

        async with worker_task(app) as worker:
            await charge.defer_async(3, 100)

    Options as for WorkerThread. On leaving, the worker stops as SIGTERM would and is
    awaited; a worker that failed raises there.
    """
    worker = Worker(app, config or WorkerConfig(**{"maintenance": False, **options}))
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    running = asyncio.create_task(
        _run_until_started(worker, lambda: loop.call_soon_threadsafe(started.set)),
        name="pgbaton-worker",
    )
    try:
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({waiting, running}, timeout=START_TIMEOUT_SECONDS,
                           return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if running.done():
            await running
            raise PgbatonError("the worker stopped as soon as it started")
        if not started.is_set():
            raise PgbatonError(
                f"the worker did not start within {START_TIMEOUT_SECONDS:g} s"
            )
        yield worker
    finally:
        if not running.done():
            worker.request_stop()
        status = await running
        worker.exit_status = status
    if status != 0:
        raise PgbatonError(f"the worker failed (exit status {status}); its log says why")
