"""Running workers: one asyncio loop per process, signals, and several processes."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading

from ..app import App
from .runner import Worker, WorkerConfig

__all__ = ["Worker", "WorkerConfig", "run_worker"]

logger = logging.getLogger("pgbaton.worker")


def run_worker(app: App, config: WorkerConfig, app_spec: str | None = None) -> int:
    """Run until SIGTERM or SIGINT (a second one stops at once); returns an exit status.

    With processes > 1 this process supervises that many worker processes, started from
    app_spec (MODULE:ATTRIBUTE, as given to `pgbaton worker`), and forwards signals.
    """
    if config.processes > 1:
        if app_spec is None:
            raise ValueError("several processes need the app as MODULE:ATTRIBUTE (app_spec)")
        return _supervise(app_spec, app.schema, config)
    worker = Worker(app, config)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, worker.request_stop)
        await worker.run()

    asyncio.run(main())
    if any(t is not threading.main_thread() and t.is_alive() and not t.daemon
           for t in threading.enumerate()):
        # A sync handler still runs in a thread after its job was released; its result
        # is discarded, so do not let the interpreter wait for it at exit.
        logging.shutdown()
        os._exit(0)
    return 0


def _supervise(app_spec: str, schema: str, config: WorkerConfig) -> int:
    argv = [
        sys.executable, "-m", "pgbaton", "worker", app_spec, "--processes", "1",
        "--schema", schema,
        "--concurrency", str(config.concurrency), "--lease", str(config.lease),
        "--poll-interval", str(config.poll_interval),
        "--shutdown-grace", str(config.shutdown_grace),
    ]
    if config.queues:
        argv += ["--queues", ",".join(config.queues)]
    if not config.maintenance:
        argv.append("--no-maintenance")
    if config.dsn:
        argv += ["--dsn", config.dsn]
    children = [subprocess.Popen(argv) for _ in range(config.processes)]

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return max(child.wait() for child in children)
