"""Running `pgbaton` as a user does (a subprocess, the real output) and writing the small
application modules it loads."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_VARIABLES = ("PGBATON_DSN", "DATABASE_URL", "PGBATON_SCHEMA", "PGAPPNAME",
                    "PGBATON_LOG_LEVEL", "PGBATON_LOG_FORMAT", "PGBATON_EVENT_LOOP")


def clean_env(dsn: str | None = None, **extra: str) -> dict[str, str]:
    """The environment without any pgbaton setting, then PGBATON_DSN and extra if given."""
    env = {k: v for k, v in os.environ.items() if k not in SOURCE_VARIABLES}
    if dsn:
        env["PGBATON_DSN"] = dsn
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}


def pgbaton(
    *args: str, dsn: str | None = None, env: dict[str, str] | None = None,
    cwd: Path = ROOT, timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run the command as a user would, with the DSN only where the test gives one."""
    return subprocess.run(
        [sys.executable, "-m", "pgbaton", *args],
        capture_output=True, text=True, env=env if env is not None else clean_env(dsn),
        cwd=cwd, timeout=timeout, check=False,
    )


APP_SOURCE = '''
import pgbaton

app = pgbaton.App({dsn!r}, schema={schema!r})


@app.task(queue="billing", max_attempts=3, key=lambda customer_id, **_: customer_id)
def charge(customer_id: int, amount: int) -> None:
    return None


@app.task
def noop() -> None:
    return None
'''


def write_app(folder: Path, name: str, dsn: str | None = None, schema: str | None = None) -> str:
    """A module `name` in folder with an App (DSN and schema in code, or None) and two
    tasks; returns its MODULE:APP."""
    (folder / f"{name}.py").write_text(APP_SOURCE.format(dsn=dsn, schema=schema))
    return f"{name}:app"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Forwarder:
    """A TCP forwarder from a local port to the real server: a database that comes up
    when the test says so."""

    def __init__(self, port: int, host: str, target_port: int) -> None:
        self.host, self.target_port = host, target_port
        self.listener = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = self._connect()
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _connect(self) -> socket.socket:
        if not self.host.startswith("/"):
            return socket.create_connection((self.host, self.target_port))
        upstream = socket.socket(socket.AF_UNIX)  # libpq's socket file in that folder
        upstream.connect(f"{self.host}/.s.PGSQL.{self.target_port}")
        return upstream

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()
