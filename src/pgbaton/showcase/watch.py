"""Watching the demo in the dashboard: serving it beside the demo (`pgbaton demo
--dashboard`), and keeping the demo's schema and server until Ctrl-C (`--keep`)."""

from __future__ import annotations

import shlex
import signal
import threading
import time
from types import FrameType
from typing import Any

from rich.console import Console

from ..dsn import redact_dsn
from ..errors import ConfigurationError

STARTUP_SECONDS = 10.0


def dashboard_command(dsn: str, schema: str) -> str:
    """The command that shows the demo's schema in a dashboard of its own."""
    return f"pgbaton dashboard --dsn {shlex.quote(redact_dsn(dsn))} --schema {schema}"


class DashboardThread:
    """The dashboard on 127.0.0.1:port, served by uvicorn from a thread of this process."""

    def __init__(self, dsn: str, schema: str, port: int) -> None:
        from ..web.command import _need_web_extra

        _need_web_extra()
        import uvicorn

        from ..web.app import create_app

        self.url = f"http://127.0.0.1:{port}/"
        config = uvicorn.Config(create_app(dsn, schema=schema), host="127.0.0.1", port=port,
                                log_level="critical", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True,
                                        name="pgbaton demo dashboard")

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + STARTUP_SECONDS
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigurationError(
                    f"cannot serve the dashboard at {self.url}: is the port taken? "
                    "Give another with --port")
            time.sleep(0.05)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(STARTUP_SECONDS)


def _interrupt(signum: int, frame: FrameType | None) -> Any:
    raise KeyboardInterrupt


def until_interrupted(console: Console, schema: str) -> None:
    """Keep the process (and so the demo's schema and embedded server) until Ctrl-C or
    SIGTERM."""
    console.print(f"The demo's jobs stay in schema {schema} until you press Ctrl-C, "
                  "which drops it.")
    # SIGINT too: a shell that starts the demo in the background hands it SIGINT
    # ignored, and Ctrl-C (or kill -INT) must still end it.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    previous_int = signal.signal(signal.SIGINT, _interrupt)
    try:
        while True:
            # Short naps, not one long sleep: the kernel may hand the signal to another
            # thread (the dashboard's), which does not wake this one, and Python raises
            # KeyboardInterrupt here only once this thread runs again.
            time.sleep(0.2)
    except KeyboardInterrupt:
        console.print(f"dropping schema {schema}")
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
