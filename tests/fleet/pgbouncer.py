"""A real PgBouncer (Debian's `pgbouncer`) in front of the test server, in transaction
pooling mode, on a free loopback port. Only the process this module started is stopped,
by its pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.fleet.servers import free_port

# PgBouncer refuses to run as root; as root it is started with `-u` as this user.
RUN_AS = "postgres"


def binary() -> str | None:
    """Debian installs it in /usr/sbin, which not every PATH holds."""
    found = shutil.which("pgbouncer")
    if found is None and os.access("/usr/sbin/pgbouncer", os.X_OK):
        found = "/usr/sbin/pgbouncer"
    return found


def unavailable() -> str | None:
    """Why no PgBouncer can be started here, or None when it can."""
    if binary() is None:
        return "needs Debian's pgbouncer (apt-get install pgbouncer)"
    return None


def cannot_reach(server_dsn: str) -> str | None:
    """Why PgBouncer, running as RUN_AS, could not reach the server, or None: a server on
    a Unix socket in a folder private to root (the embedded server of the tests) is out
    of its reach."""
    host = str(conninfo_to_dict(server_dsn).get("host") or "")
    if not host.startswith("/") or os.geteuid() != 0:
        return None
    done = subprocess.run(["runuser", "-u", RUN_AS, "--", "test", "-x", host], check=False)
    if done.returncode != 0:
        return (f"the server's socket folder {host} is private to root, and PgBouncer runs "
                f"as {RUN_AS} (PGBATON_TEST_DSN on TCP runs these tests)")
    return None


def version() -> str:
    done = subprocess.run([str(binary()), "--version"], capture_output=True, text=True,
                          check=True)
    return done.stdout.split()[1]


@dataclass
class PgBouncer:
    """One pgbouncer process; `dsn` reaches the server's database through it."""

    process: subprocess.Popen[bytes]
    folder: Path
    port: int
    server: dict[str, str]

    @property
    def dsn(self) -> str:
        return make_conninfo(host="127.0.0.1", port=str(self.port),
                             user=self.server.get("user", "postgres"),
                             dbname=self.server.get("dbname", "postgres"))

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # PgBouncer: immediate shutdown
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)


def start(server_dsn: str, *, pool_size: int = 4, pool_mode: str = "transaction",
          settings: str = "") -> PgBouncer:
    """PgBouncer on 127.0.0.1 (a free port) for the database of server_dsn, with more
    `settings` lines for its [pgbouncer] section; returns once a query goes through it."""
    server = {k: str(v) for k, v in conninfo_to_dict(server_dsn).items()}
    # A folder the unprivileged user can read: pytest's own are private to root.
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    folder.chmod(0o777)
    port = free_port()
    target = " ".join(f"{key}={server[key]}" for key in ("host", "port", "user", "dbname")
                      if key in server)
    user = server.get("user", "postgres")
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(f"""\
[databases]
{server.get("dbname", "postgres")} = {target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 200
logfile = {folder / "pgbouncer.log"}
; PgBouncer before 1.21 passes `options` on to no server and refuses it by default
ignore_startup_parameters = extra_float_digits,options
{settings}
""")
    for path in folder.iterdir():
        path.chmod(0o644)
    command = [str(binary()), str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        command[1:1] = ["-u", RUN_AS]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    bouncer = PgBouncer(process, folder, port, server)
    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(bouncer.dsn, connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return bouncer
        except psycopg.OperationalError as error:
            if process.poll() is not None or time.monotonic() > deadline:
                bouncer.stop()
                raise RuntimeError(f"pgbouncer did not start: {error}\n{bouncer.log()}") \
                    from error
            time.sleep(0.1)
