"""create_app: the dashboard as a Starlette app, and its route table.

Its URLs are a contract (bookmarks and scripts use them): / the overview, /jobs the
list (filters as query parameters), /jobs/<id> one job, /queues, /workers, /periodic (the
schedules, docs/explanation/schedules.md), /health,
/healthz, /metrics. Pages are GETs and never write; every action is a POST with a CSRF
token, and every refusal is a 4xx page that says why. Mounted under a prefix, links
follow the mount (root_path).

The route table below is the contract in one place; each handler is a few lines over
the Dashboard's reads and actions (store.py), in the module of its page: overview.py,
jobs.py, queues.py, schedules.py, health.py, over board.py (the state, rendering, the
guard and ERRORS, the refusals' statuses). Gate checks every request before any route.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..app import App
from ..dsn import resolve_dsn
from ..limits import MAX_DASHBOARD_BODY
from .board import ERRORS, SCHEDULE_NOTICES, Board, Handler, PayloadTooLarge, refusal_of
from .health import HealthPages
from .jobs import TABS_EVERY_SECONDS, JobPages
from .overview import OverviewPages
from .queues import QUEUE_NOTICES, QueuePages
from .schedules import SchedulePages
from .security import SAFE_METHODS, Guard, Hosts, Resolver, cross_origin
from .store import STATE_COUNT_CAP

# What moved to the pages' modules and board.py stays a name of this module.
__all__ = [
    "ERRORS",
    "QUEUE_NOTICES",
    "SCHEDULE_NOTICES",
    "STATE_COUNT_CAP",
    "TABS_EVERY_SECONDS",
    "Board",
    "Dashboard",
    "Gate",
    "Handler",
    "PayloadTooLarge",
    "create_app",
    "refusal_of",
]

logger = logging.getLogger("pgbaton.web")
HERE = Path(__file__).parent


class Dashboard(OverviewPages, JobPages, QueuePages, SchedulePages, HealthPages):
    """The dashboard behind the routes: Board (the state, rendering, the guard) with
    each page's handlers."""


def create_app(
    dsn: str | None = None,
    *,
    schema: str = "pgbaton",
    app: App | None = None,
    resolver: Resolver | None = None,
    read_only: bool = False,
    token: str | None = None,
    basic_auth: tuple[str, str] | None = None,
    allowed_hosts: Iterable[str] | None = None,
    bound_host: str | None = None,
) -> Starlette:
    """The dashboard of one pgbaton schema, as an ASGI app to serve or mount.

    Access: resolver(request) -> "full" | "read-only" | "forbidden" when mounted in an
    app that knows its users; else token / basic_auth (default: from the environment,
    pgbaton.web.security); else full access for whoever reaches it. app=, a pgbaton.App,
    lets the periodic page check a schedule's task and args against its handlers.

    Host headers answered (any other is a 400 that says how to allow it): localhost,
    127.0.0.1 and [::1] on any port, bound_host (the address served on), and
    allowed_hosts (default: PGBATON_DASHBOARD_ALLOWED_HOSTS, a comma list); "*" allows
    any, for an app whose own middleware already checks the Host.
    """
    if app is not None and dsn is None:
        dsn = app.dsn
        schema = app.schema
    if token is None and basic_auth is None:
        guard = Guard.from_environment(resolver=resolver, read_only=read_only)
    else:
        guard = Guard(token=token, basic_auth=basic_auth, resolver=resolver,
                      read_only=read_only)
    if allowed_hosts is None:
        hosts = Hosts.from_environment(bound=bound_host)
    else:
        hosts = Hosts(allowed_hosts, bound=bound_host)
    board = Dashboard(resolve_dsn(dsn), schema, guard, app, hosts)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await board.close()

    guarded = board.guarded
    routes = [
        Route("/", guarded(board.overview)),
        Route("/live", guarded(board.live)),
        Route("/jobs", guarded(board.jobs)),
        Route("/jobs/bulk", guarded(board.bulk_preview)),
        Route("/jobs/bulk", guarded(board.bulk, acts=True), methods=["POST"]),
        Route("/jobs/{job_id}", guarded(board.job)),
        Route("/jobs/{job_id}/{action}", guarded(board.act, acts=True), methods=["POST"]),
        Route("/queues", guarded(board.queues)),
        Route("/queues/{action}", guarded(board.queue_act, acts=True), methods=["POST"]),
        Route("/workers", guarded(board.workers)),
        Route("/periodic", guarded(board.periodic)),
        Route("/tasks", guarded(board.tasks)),
        Route("/periodic/{action}", guarded(board.schedule_act, acts=True),
              methods=["POST"]),
        Route("/health", guarded(board.health)),
        Route("/healthz", board.healthz),
        Route("/metrics", guarded(board.metrics)),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = {404: "there is no such page", 405: "this URL does not take that method"}
        return board.error(request, exc.status_code,
                           message.get(exc.status_code, exc.detail or "bad request"))

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        cls: board.refused for cls in ERRORS}
    handlers[HTTPException] = http_error
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers,
                     middleware=[Middleware(Gate, board=board)])


class Gate:
    """Before any route (pages, /metrics, /healthz, static files): a Host the dashboard
    answers to, an unsafe method sent from its own origin, a body no larger than
    MAX_DASHBOARD_BODY. A request with the bearer token is a script's: no origin to check."""

    def __init__(self, app: ASGIApp, board: Dashboard) -> None:
        self.app = app
        self.board = board

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = self.refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, _limited(receive), send)

    def refusal(self, request: Request) -> Response | None:
        board = self.board
        host = request.headers.get("host")
        if not board.hosts.allows(host):
            return board.refuse_before_routing(request, 400, (
                f"this dashboard does not answer to the host {host!r}: a name it was not "
                "told of may be a web page's DNS rebinding attack. It answers to "
                f"{board.hosts.described()}. To allow a name: pgbaton dashboard "
                "--allowed-host NAME (repeatable), PGBATON_DASHBOARD_ALLOWED_HOSTS=NAME,"
                "NAME, or create_app(allowed_hosts=[...])"))
        if request.method not in SAFE_METHODS and not board.guard.bearer(request):
            why = cross_origin(request)
            if why is not None:
                logger.warning("dashboard: refused a %s of %s: %s", request.method,
                               request.url.path, why)
                return board.refuse_before_routing(
                    request, 403, f"a cross-origin request is refused: {why}; nothing was changed")
        length = request.headers.get("content-length", "")
        if length.isascii() and length.isdigit() and int(length) > MAX_DASHBOARD_BODY:
            return board.refuse_before_routing(request, 413, _too_large())
        return None


def _too_large() -> str:
    return (f"the request body is larger than {MAX_DASHBOARD_BODY // 1024} KiB, more than any form "
            "of the dashboard sends; nothing was changed")


def _limited(receive: Receive) -> Receive:
    """receive, raising PayloadTooLarge past MAX_DASHBOARD_BODY (a body sent without a length)."""
    seen = 0

    async def limited() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > MAX_DASHBOARD_BODY:
                raise PayloadTooLarge(_too_large())
        return message

    return limited

