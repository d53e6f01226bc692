"""One worker process under the process supervisor (processes.py): it reads its settings
from standard input, runs one worker, and stops when told to or when the supervisor's
end of standard input closes (the supervisor died)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

from .. import logs
from ..app import load_app
from ..dsn import with_application_name
from .config import WorkerConfig, default_worker_id
from .run import run_worker


def _child_main() -> int:
    """A child: read its settings from stdin, run one worker, stop when told or when
    the supervisor's end of stdin closes."""
    # The supervisor's command line put its logging settings in the environment.
    logs.configure(os.environ.get("PGBATON_LOG_LEVEL", "INFO"),
                   os.environ.get("PGBATON_LOG_FORMAT", "text"))
    settings: dict[str, Any] = json.loads(sys.stdin.readline())
    app = load_app(settings["app"])
    config = WorkerConfig(**settings["config"])
    config.worker_id = config.worker_id or default_worker_id()
    if config.dsn:
        # Each child names its connections after itself (pg_stat_activity, doctor).
        config.dsn = with_application_name(config.dsn, f"pgbaton worker {config.worker_id}")
    # config.dsn is the database worked; for routed queues it is not the App's own.
    routed = app.database_of(config.queues) is not None
    app.configure(dsn=None if routed else config.dsn, schema=settings["schema"])

    def watch_parent() -> None:
        sys.stdin.read()  # returns at EOF: the supervisor is gone
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_parent, name="pgbaton-parent-watch", daemon=True).start()
    return run_worker(app, config)


if __name__ == "__main__":
    sys.exit(_child_main())
