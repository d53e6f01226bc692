"""`pgbaton dashboard` and `pgbaton metrics`."""

from __future__ import annotations

import errno
import importlib
import socket
import time
from typing import Any

import click

from .._cli_common import dsn_option, resolve_dsn, schema_option
from ..errors import ConfigurationError, PgbatonError
from ..queue import Queue

MISSING_EXTRA = "the dashboard needs its extra: pip install 'pgbaton[web]'"


def _need_web_extra() -> None:
    for module in ("starlette", "uvicorn", "jinja2", "prometheus_client"):
        try:
            importlib.import_module(module)
        except ImportError:
            raise ConfigurationError(f"{MISSING_EXTRA} ({module} is missing)") from None


def _load_app(spec: str) -> Any:
    from ..app import load_app

    try:
        return load_app(spec)
    except ConfigurationError as error:
        raise click.BadParameter(str(error), param_hint="--app") from None


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; other than this machine only with authentication.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--app", "app_spec", default=None, metavar="MODULE:APP",
              help="Your pgbaton.App, to show its periodic schedules.")
@click.option("--read-only", is_flag=True, help="Show everything, change nothing.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A Host name it answers besides localhost and the bound address "
                   "(NAME, NAME:PORT, *.DOMAIN; repeatable; also "
                   "PGBATON_DASHBOARD_ALLOWED_HOSTS, a comma list).")
@dsn_option
@schema_option
def dashboard(*, host: str, port: int, app_spec: str | None, read_only: bool,
              allowed_hosts: tuple[str, ...], dsn: str | None, schema: str) -> None:
    """Serve the web dashboard (http://127.0.0.1:8000 by default)."""
    _need_web_extra()
    import uvicorn

    from .app import create_app
    from .security import Guard, Hosts, check_bind

    check_bind(host, Guard.from_environment(read_only=read_only))
    hosts = Hosts.from_environment(allowed_hosts, bound=host)
    pgbaton_app = _load_app(app_spec) if app_spec else None
    dsn = resolve_dsn(dsn, fallback=pgbaton_app._dsn if pgbaton_app else None)
    schema = pgbaton_app.schema if pgbaton_app else schema
    # Reached and migrated before anything says it started: an unreachable database or
    # an out-of-date schema is one line and exit 1, as for every command.
    with Queue(dsn, schema=schema) as queue:
        queue.ping()
    asgi = create_app(dsn, schema=schema,
                      app=pgbaton_app, read_only=read_only, allowed_hosts=hosts.given,
                      bound_host=host)
    sock = listening_socket(host, port)
    bound = sock.getsockname()[1]
    click.echo(f"pgbaton dashboard on http://{_url_host(host)}:{bound}/", err=True)
    server = uvicorn.Server(uvicorn.Config(asgi, log_level="warning"))
    server.run(sockets=[sock])


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound and listening before anything says it started: a busy
    port or an address this machine does not have is one line naming it."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as error:
        raise PgbatonError(f"cannot listen on {host}: {error.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise cannot_listen(host, port, error) from None
    return sock


def cannot_listen(host: str, port: int, error: OSError) -> PgbatonError:
    """What a server of the command line says when it cannot bind: one line."""
    if error.errno == errno.EADDRINUSE:
        return PgbatonError(f"port {port} on {host} is already in use: stop what listens "
                            "there, or choose another with --port")
    return PgbatonError(f"cannot listen on {host}:{port}: {error.strerror}")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9187, show_default=True, type=click.IntRange(0, 65535))
@dsn_option
@schema_option
def metrics(host: str, port: int, dsn: str | None, schema: str) -> None:
    """Serve the queue's gauges (depth, oldest pending age, expired leases) for Prometheus."""
    _need_web_extra()
    from prometheus_client import CollectorRegistry, start_http_server

    from ..metrics import QueueCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(resolve_dsn(dsn), schema))
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as error:
        raise cannot_listen(host, port, error) from None
    click.echo(f"pgbaton metrics on http://{host}:{port}/metrics", err=True)
    while True:
        time.sleep(3600)
