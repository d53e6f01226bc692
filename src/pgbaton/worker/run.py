"""run_worker(): a worker in this process until a stop signal, or a supervisor of
several worker processes."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NoReturn

from ..app import App
from .config import WorkerConfig
from .loop import runner as loop_runner
from .processes import ProcessSupervisor
from .runner import FORCED_STOP_SECONDS, Worker

logger = logging.getLogger("pgbaton.worker")


def run_worker(app: App, config: WorkerConfig, app_spec: str | None = None) -> int:
    """Run until SIGTERM or SIGINT (a second one stops within a second, whatever is
    stuck); returns an exit status: 0 after a clean stop, 1 when the worker failed.

    With processes > 1 this process supervises that many worker processes, started from
    app_spec (MODULE:ATTRIBUTE, as given to `pgbaton worker`).
    """
    if config.processes > 1:
        if app_spec is None:
            raise ValueError(
                "several processes need the app as MODULE:ATTRIBUTE: run "
                "`pgbaton worker MODULE:APP --processes N`, or pass app_spec"
            )
        return ProcessSupervisor(app_spec, app.schema, config).run()
    if config.metrics_port:
        from ..metrics import serve  # prometheus-client comes with pgbaton[web]

        serve(app, config.metrics_port)
        logger.info("worker metrics on http://127.0.0.1:%d/metrics", config.metrics_port)
    worker = Worker(app, config)
    received = 0

    async def main() -> int:
        loop = asyncio.get_running_loop()

        def on_signal(signum: int, _frame: object) -> None:
            # A plain signal handler, not loop.add_signal_handler: it runs even while a
            # handler blocks the loop, so a second signal always ends the process.
            nonlocal received
            received += 1
            loop.call_soon_threadsafe(worker.request_stop)
            if received == 2:
                timer = threading.Timer(FORCED_STOP_SECONDS, _exit_now)
                timer.daemon = True
                timer.start()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)
        return await worker.run()

    with loop_runner(config.event_loop) as on_loop:
        # asyncio's own threads (asyncio.to_thread, getaddrinfo) come from an executor
        # that knows which of its calls still run: closing the loop joins its threads.
        calls = _TrackedExecutor(thread_name_prefix="pgbaton-asyncio")
        on_loop.get_loop().set_default_executor(calls)
        status = on_loop.run(main())
        if calls.busy():
            _exit_past_stray_threads(status)
    if any(t is not threading.main_thread() and t.is_alive() and not t.daemon
           for t in threading.enumerate()):
        _exit_past_stray_threads(status)
    return status


class _TrackedExecutor(ThreadPoolExecutor):
    """A thread pool that tells whether any call it was given still runs."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._unfinished: set[Future[Any]] = set()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        self._unfinished.add(future)
        future.add_done_callback(self._unfinished.discard)
        return future

    def busy(self) -> bool:
        return any(not future.done() for future in list(self._unfinished))


def _exit_past_stray_threads(status: int) -> NoReturn:
    """A handler's thread (a sync handler, or its asyncio.to_thread) still runs after
    its job was released; its result is discarded, so neither closing the loop nor the
    interpreter's exit may wait for it."""
    logging.shutdown()
    os._exit(status)


def _exit_now() -> None:
    logger.error("second stop request: exiting now")
    logging.shutdown()
    os._exit(1)
