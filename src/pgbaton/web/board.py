"""Board: what every page of the dashboard stands on. Its state (the store, the queue
for actions, the guard, the templates, the live hub), how a page or a refusal is
rendered, and the guard that runs before each route (`guarded`). ERRORS: every refusal
a route can meet, and its status.

Each page's handlers are a class of their own over Board (overview.py, jobs.py,
queues.py, schedules.py, health.py); app.py's Dashboard is all of them, and its
create_app the route table."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import jinja2
import psycopg
from prometheus_client import CollectorRegistry
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.templating import Jinja2Templates

from .. import _sql, tracebacks
from .._sql import notify_channel
from ..app import App
from ..doctor.findings import age
from ..errors import ConnectionFailed, InvalidArgument, ScheduleChanged
from ..metrics import QueueCollector
from ..queue_async import AsyncQueue
from . import charts, moments, params
from .live import LiveHub
from .security import CSRF_FIELD, SESSION_COOKIE, Decision, Guard, Hosts
from .store import Store

logger = logging.getLogger("pgbaton.web")
HERE = Path(__file__).parent
Handler = Callable[[Request], Awaitable[Response]]


class PayloadTooLarge(Exception):
    """A request body beyond MAX_DASHBOARD_BODY."""


def _slow(_: Exception) -> str:
    return "the database took too long to answer this page: narrow the filter"


def _down(_: Exception) -> str:
    return "the database cannot be reached just now"


# Every refusal any route can meet, and its status. The most specific class wins (a
# QueryCanceled is an OperationalError): an exception not here is a bug, and a 500.
ERRORS: dict[type[Exception], tuple[int, Callable[[Exception], str]]] = {
    params.BadInput: (400, str),
    InvalidArgument: (400, str),
    ScheduleChanged: (409, str),
    PayloadTooLarge: (413, str),
    psycopg.errors.QueryCanceled: (503, _slow),
    psycopg.OperationalError: (503, _down),
    ConnectionFailed: (503, _down),
    OSError: (503, _down),
}


def refusal_of(error: Exception) -> tuple[int, str]:
    for cls in type(error).__mro__:
        if cls in ERRORS:
            status, describe = ERRORS[cls]
            return status, describe(error)
    raise error


class Board:
    """The state behind the routes: the store, the queue for actions, the guard."""

    def __init__(self, dsn: str, schema: str, guard: Guard, app: App | None,
                 hosts: Hosts) -> None:
        self.schema = _sql.check_schema_name(schema)
        self.dsn = dsn
        self.guard = guard
        self.hosts = hosts
        self.pgbaton_app = app
        self.store = Store(dsn, self.schema)
        self.queue = AsyncQueue(dsn, schema=self.schema)
        # Autoescape everywhere: job args and errors are whatever producers wrote.
        environment = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True
        )
        self.templates = Jinja2Templates(env=environment)
        self.templates.env.globals["age"] = age
        self.templates.env.filters["when"] = moments.moment
        self.templates.env.filters["pretty"] = _pretty
        self.templates.env.filters["traceback_parts"] = tracebacks.parts
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(QueueCollector(dsn, self.schema))
        self.hub = LiveHub(dsn, notify_channel(self.schema), self.render_overview_panel)

    async def close(self) -> None:
        await self.hub.stop()
        await self.store.close()
        await self.queue.close()

    # -- rendering --------------------------------------------------------------

    def page(
        self, request: Request, template: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        decision: Decision = getattr(request.state, "decision", None) or Decision(
            "read-only", "anonymous")
        session = request.cookies.get(SESSION_COOKIE)
        fresh = not self.guard.valid_session(session)
        if fresh or session is None:
            session = self.guard.new_session()
        base = request.scope.get("root_path", "")
        response: Response = self.templates.TemplateResponse(
            request, template,
            {**context, "base": base, "csrf_field": CSRF_FIELD,
             "csrf_token": self.guard.csrf_token(session),
             "can_act": decision.access == "full", "who": decision.who,
             "read_only": self.guard.read_only},
            status_code=status,
        )
        if fresh:
            response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict",
                                secure=request.url.scheme == "https", path=base or "/")
        return response

    def error(self, request: Request, status: int, message: str) -> Response:
        if "text/html" not in request.headers.get("accept", ""):
            return PlainTextResponse(f"{status}: {message}\n", status_code=status)
        # A refused schedule change leads back to the schedules, to read them again.
        back = ("/periodic", "periodic jobs") if request.url.path.endswith(
            tuple(f"/periodic/{action}" for action in SCHEDULE_NOTICES)) else None
        return self.page(request, "error.html", {"status": status, "message": message,
                                                 "back": back}, status)

    def refuse_before_routing(self, request: Request, status: int, message: str) -> Response:
        """A refusal of the gate: no session, no CSRF token, nothing a page of another
        origin could use."""
        if "text/html" not in request.headers.get("accept", ""):
            return PlainTextResponse(f"{status}: {message}\n", status_code=status)
        return self.templates.TemplateResponse(
            request, "error.html",
            {"status": status, "message": message,
             "base": request.scope.get("root_path", ""), "can_act": False, "who": ""},
            status_code=status,
        )

    async def refused(self, request: Request, error: Exception) -> Response:
        """The answer of every route to an exception of ERRORS."""
        status, message = refusal_of(error)
        if status == 503:
            logger.warning("dashboard: %s: %s", message, error)
        return self.error(request, status, message)

    async def render_overview_panel(self) -> str:
        overview = await self.store.overview()
        template = self.templates.get_template("_overview_panel.html")
        return str(template.render(**self.overview_context(overview)))

    def overview_context(self, overview: Any) -> dict[str, Any]:
        queues = [
            {**row,
             "throughput": charts.throughput(overview.minutes.get(row["queue"], []),
                                             overview.at),
             "queue_time": charts.queue_time(overview.minutes.get(row["queue"], []),
                                             overview.at)}
            for row in overview.queues
        ]
        # Queues with finished work in the last hour but nothing waiting now.
        for name, minutes in sorted(overview.minutes.items()):
            if not any(q["queue"] == name for q in queues):
                queues.append({
                    "queue": name, "paused": False, "pending": 0, "scheduled": 0,
                    "running": 0, "failed": 0,
                    "oldest_pending_seconds": None, "expired_leases": 0,
                    "throughput": charts.throughput(minutes, overview.at),
                    "queue_time": charts.queue_time(minutes, overview.at),
                })
        return {"queues": queues, "workers": overview.workers, "leader": overview.leader,
                "at": overview.at}


    # -- the guard, before every route -------------------------------------------

    def guarded(self, handler: Handler, *, acts: bool = False) -> Handler:
        """handler behind the guard: access decided, actions checked for their CSRF
        token; what it raises is answered by the table ERRORS."""

        async def endpoint(request: Request) -> Response:
            refusal = await self._refusal(request, acts)
            if refusal is not None:
                return refusal
            return await handler(request)

        return endpoint

    async def _refusal(self, request: Request, acts: bool) -> Response | None:
        decision = await self.guard.decide(request)
        request.state.decision = decision
        if decision.access == "forbidden":
            if decision.challenge:
                return PlainTextResponse(
                    "401: log in to see the pgbaton dashboard\n", status_code=401,
                    headers={"WWW-Authenticate": 'Basic realm="pgbaton"'},
                )
            return self.error(request, 403, "you may not see this dashboard")
        if not acts:
            return None
        if decision.access != "full":
            return self.error(request, 403, "this dashboard is read-only for you: "
                              "nothing was changed")
        form = await request.form()
        submitted = form.get(CSRF_FIELD)
        if decision.needs_csrf and not self.guard.csrf_ok(
            request.cookies.get(SESSION_COOKIE),
            submitted if isinstance(submitted, str) else None,
        ):
            return self.error(request, 403, "missing or wrong CSRF token: reload the page "
                              "and try again; nothing was changed")
        return None


# The schedule actions and what the periodic page says after each (schedules.py);
# here, as Board.error leads a refused one back to the schedules.
SCHEDULE_NOTICES = {
    "add": "Added: the leader enqueues its ticks from the next one on.",
    "edit": "Changed: the change holds from the next tick, on every worker.",
    "pause": "Paused: it enqueues nothing until resumed.",
    "resume": "Resumed: its ticks are enqueued again from the next one (none caught up).",
    "run-now": "Enqueued: its job runs now, besides its ticks.",
    "remove": "Removed: the jobs it enqueued stay.",
}


def _pretty(value: Any) -> str:
    """JSON as a person reads it; the template's autoescape makes it safe, not this."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)
