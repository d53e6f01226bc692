"""create_app: the dashboard as a Starlette app.

Its URLs are a contract (bookmarks and scripts use them): / the overview, /jobs the
list (filters as query parameters), /jobs/<id> one job, /queues, /workers, /periodic (the
schedules, docs/schedules.md), /health,
/healthz, /metrics. Pages are GETs and never write; every action is a POST with a CSRF
token, and every refusal is a 4xx page that says why. Mounted under a prefix, links
follow the mount (root_path).

Over 400 lines on purpose: one handler per URL of the contract above, each a few lines
over the Dashboard's reads and actions (store.py), kept together so the contract reads
in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import jinja2
import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import _database, _sql, tracebacks
from .._checks import check_job_id
from .._sql import notify_channel
from ..actions import ACTIONS, BY_NAME, offered
from ..app import App
from ..cron import CATCH_UP_POLICIES, DEFAULT_CATCH_UP_LIMIT
from ..doctor.checks import run_checks
from ..doctor.findings import Thresholds, age, overall
from ..doctor.inspection import Inspection
from ..dsn import resolve_dsn
from ..errors import ConnectionFailed, InvalidArgument, ScheduleChanged
from ..limits import INT4_MAX, INT4_MIN, INT8_MAX, MAX_DASHBOARD_BODY
from ..metrics import QueueCollector
from ..models import STATES
from ..queue_async import AsyncQueue
from ..schedules import check_task, run_now_job
from ..worker.presence import STALE_SECONDS
from . import charts, moments, params
from .live import LiveHub, sse
from .security import (
    CSRF_FIELD,
    SAFE_METHODS,
    SESSION_COOKIE,
    Decision,
    Guard,
    Hosts,
    Resolver,
    cross_origin,
)
from .store import STATE_COUNT_CAP, Store

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


class Dashboard:
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


    # -- routes ---------------------------------------------------------------

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

    async def overview(self, request: Request) -> Response:
        data = self.overview_context(await self.store.overview())
        if request.query_params.get("partial"):
            return self.page(request, "_overview_panel.html", data)
        return self.page(request, "overview.html", data)

    async def live(self, request: Request) -> Response:
        inbox = self.hub.subscribe()

        async def stream() -> AsyncIterator[str]:
            try:
                yield "retry: 3000\n\n"
                while True:
                    try:
                        html = await asyncio.wait_for(inbox.get(), 15)
                    except TimeoutError:
                        yield ": still here\n\n"  # keeps proxies from closing the stream
                        continue
                    yield sse("overview", html)
            finally:
                await self.hub.unsubscribe(inbox)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    async def jobs(self, request: Request) -> Response:
        query = request.query_params
        job_filter = params.job_filter(query, query.getlist("ids"))
        if query.get("partial") == "tabs":
            return self.page(request, "_state_tabs.html",
                             await self.tabs_context(job_filter))
        limit = params.page_size(query)
        before = params.cursor(query)
        rows = await self.store.job_page(job_filter, before, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        filters = params.filter_query(job_filter)
        next_query = params.encode({**filters, "limit": query.get("limit"),
                                    "before": rows[-1]["id"]}) if more else None
        return self.page(request, "jobs.html", {
            "rows": rows, "filters": filters, "next_query": next_query,
            "first_query": params.encode({**filters, "limit": query.get("limit")}),
            "paged": before is not None, "actions": ACTIONS,
            "states": STATES, **await self.tabs_context(job_filter),
        })

    async def tabs_context(self, job_filter: Any) -> dict[str, Any]:
        """The state tabs: each state's count under the filter (its status aside), and
        the link of each tab. Counts the database cannot give in time are left out,
        not a 503: the list itself still answers."""
        started = time.monotonic()
        try:
            counts: dict[str, int] | None = await self.store.state_counts(job_filter)
        except psycopg.errors.QueryCanceled:
            counts = None
        # As the live overview: counts that took long are asked for less often, so an
        # open page never keeps a backend busy more than a fifth of the time.
        every = max(TABS_EVERY_SECONDS, 4 * (time.monotonic() - started))
        # The selection (`ids`) stays in every tab's link and in the poll, as it stays
        # in the counts: a tab counts, and its link lists, the selected jobs in a state.
        others = {k: v for k, v in params.filter_query(job_filter).items()
                  if k != "status"}
        return {
            "tabs": [{"state": state, "count": None if counts is None else counts.get(state),
                      "query": params.encode({**others, "status": state}),
                      "current": job_filter.status == state} for state in STATES],
            "all_query": params.encode(others), "cap": STATE_COUNT_CAP,
            "tabs_query": params.encode({**others, "status": job_filter.status,
                                         "partial": "tabs"}),
            "any_status": job_filter.status is None, "tabs_every_ms": int(every * 1000),
            "selection": len(job_filter.ids or ()),
            "unselected_query": params.encode({k: v for k, v in others.items()
                                               if k != "ids"}),
        }

    async def job(self, request: Request) -> Response:
        job_id = _job_id(request)
        found = await self.queue.get(job_id)
        if found is None:
            return self.error(request, 404, f"there is no job {job_id}")
        same_key = await self.store.jobs_of_key(found.key, job_id) if found.key else []
        done = BY_NAME.get(request.query_params.get("done", ""))
        notice = done.notice if done else None
        if done is not None and done.name == "cancel" and _still_held(found):
            # The row says cancelled, but a handler that was running runs on until its
            # worker's next heartbeat (as `pgbaton cancel` says).
            notice = (f"The job was cancelled; its handler on {found.worker_id or 'its worker'}"
                      " is told to stop at that worker's next heartbeat, and holds the job's"
                      " key until it lets go.")
        return self.page(request, "job.html", {
            "job": found, "fields": dataclasses.asdict(found), "same_key": same_key,
            "dependencies": await self.queue.dependencies(job_id),
            "logs": await self.queue.logs(job_id),
            "steps": await self.queue.steps(job_id),
            "offered": offered(found.status), "notice": notice,
        })

    async def act(self, request: Request) -> Response:
        job_id = _job_id(request)
        action = params.action(request.path_params["action"])
        form = await request.form()
        value = form.get("priority")
        priority = params.priority(value if isinstance(value, str) else None) if (
            action.takes_priority) else None
        changed = await self.queue.act(action.name, job_id, priority=priority)
        who = request.state.decision.who
        logger.info("dashboard: %s %s job %d: %s", who, action.name, job_id,
                    "done" if changed else "nothing changed")
        if not changed:
            exists = await self.queue.get(job_id) is not None
            if not exists:
                return self.error(request, 404, f"there is no job {job_id}")
            return self.error(request, 409, f"job {job_id} was not changed: "
                               f"{action.refusal}")
        base = request.scope.get("root_path", "")
        gone = action.name == "delete"
        target = f"{base}/jobs" if gone else f"{base}/jobs/{job_id}"
        return RedirectResponse(f"{target}?done={action.name}", status_code=303)

    async def bulk_preview(self, request: Request) -> Response:
        query = request.query_params
        action = params.action(query.get("action", ""))
        job_filter = params.job_filter(query, query.getlist("ids"))
        count, upto = await self.queue.count_matching(action.name, job_filter)
        return self.page(request, "bulk.html", {
            "action": action.name, "word": action.word, "count": count, "upto": upto,
            "question": action.ask_many(count), "label": action.label,
            "selected": len(job_filter.ids or ()),
            "filters": params.filter_query(job_filter), "everything": job_filter.is_empty(),
            "priority": query.get("priority"),
        })

    async def bulk(self, request: Request) -> Response:
        form = await request.form()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        action = params.action(fields.get("action", ""))
        job_filter = params.job_filter(
            fields, [v for v in form.getlist("ids") if isinstance(v, str)])
        upto = params.whole_number("upto", fields.get("upto"), minimum=0, maximum=INT8_MAX)
        priority = params.priority(fields.get("priority")) if action.takes_priority else None
        changed = await self.queue.act_matching(action.name, job_filter, upto=upto,
                                                priority=priority)
        logger.info("dashboard: %s %s on %s up to job %d: %d jobs", request.state.decision.who,
                    action.name, params.filter_query(job_filter) or "every job", upto, changed)
        return self.page(request, "bulk_done.html", {
            "action": action.name, "changed": changed, "filters": params.filter_query(job_filter),
            "query": params.encode(params.filter_query(job_filter)),
        })

    async def queues(self, request: Request) -> Response:
        overview = await self.store.overview()
        settings = {s.name: s for s in await self.queue.queue_settings()}
        queues = list(overview.queues)
        for name in sorted(set(settings) - {q["queue"] for q in queues}):
            queues.append({"queue": name, "paused": False, "pending": 0, "scheduled": 0,
                           "running": 0,
                           "failed": 0, "expired_leases": 0, "oldest_pending_seconds": None})
        return self.page(request, "queues.html", {
            "queues": queues, "settings": settings,
            "notice": QUEUE_NOTICES.get(request.query_params.get("done", "")),
        })

    async def queue_act(self, request: Request) -> Response:
        """Pause or resume one queue (docs/flow_control.md); the name is a form field,
        since a queue name may hold any character."""
        action = request.path_params["action"]
        form = await request.form()
        name = form.get("queue")
        if action not in QUEUE_NOTICES or not isinstance(name, str):
            return self.error(request, 400, "pause or resume needs a queue")
        await (self.queue.pause(name) if action == "pause" else self.queue.resume(name))
        logger.info("dashboard: %s %s queue %r", request.state.decision.who, action, name)
        base = request.scope.get("root_path", "")
        return RedirectResponse(f"{base}/queues?done={action}", status_code=303)

    async def workers(self, request: Request) -> Response:
        """Every worker of the workers table, idle ones too (docs/dashboard.md,
        "Workers"), and those holding jobs that the table does not know (a previous
        release's workers)."""
        rows = await self.store.workers(STALE_SECONDS)
        known = {row["worker_id"] for row in rows}
        holders = [w for w in await self.store.fetch("dashboard_workers")
                   if w["worker_id"] not in known]
        return self.page(request, "workers.html", {
            "workers": rows, "holders": holders, "stale_after": STALE_SECONDS,
            "live": sum(1 for row in rows if row["live"]),
        })

    async def periodic(self, request: Request) -> Response:
        """Every schedule of the table (docs/schedules.md): its next five fire times in
        its zone, its last job, its state; forms for full access."""
        now = dt.datetime.now(dt.UTC)
        schedules = []
        for schedule in await self.queue.schedules():
            # A row written elsewhere with a zone this host lacks is shown, marked.
            fires, problem = schedule.upcoming(now)
            # A str, which the template escapes (tojson would leave `"` in an attribute).
            schedules.append({"s": schedule, "fires": fires, "problem": problem,
                              "args_json": json.dumps(schedule.args, ensure_ascii=False)})
        return self.page(request, "periodic.html", {
            "schedules": schedules, "has_app": self.pgbaton_app is not None,
            "policies": CATCH_UP_POLICIES,
            "notice": SCHEDULE_NOTICES.get(request.query_params.get("done", "")),
        })

    async def tasks(self, request: Request) -> Response:
        """The App's tasks, each with its args as JSON Schema (docs/howto/typed-args.md)."""
        tasks = [] if self.pgbaton_app is None else [
            {"name": t.name, "queue": t.queue, "max_attempts": t.max_attempts,
             "typed": bool(t.arg_types), "encrypt": t.encrypt, "schema": t.args_schema()}
            for t in sorted(self.pgbaton_app.tasks.values(), key=lambda t: t.name)
        ]
        return self.page(request, "tasks.html", {
            "tasks": tasks, "has_app": self.pgbaton_app is not None,
        })

    async def schedule_act(self, request: Request) -> Response:
        """Add, edit, pause, resume, run now or remove one schedule; a refused change is
        a 400 page that names the problem, and nothing is written."""
        action = request.path_params["action"]
        if action not in SCHEDULE_NOTICES:
            return self.error(request, 404, "there is no such schedule action")
        form = await request.form()
        field = {name: value.strip() for name, value in form.items()
                 if isinstance(value, str)}
        # The name as sent: the API and the CLI take names with spaces around them.
        sent = form.get("name")
        name = sent if isinstance(sent, str) else ""
        who = request.state.decision.who
        by = f"dashboard:{who}"
        if action in ("add", "edit"):
            await self._define_schedule(action, name, field, by)
        elif action == "pause":
            await self.queue.pause_schedule(name, by=by)
        elif action == "resume":
            await self.queue.resume_schedule(name, by=by)
        elif action == "run-now":
            current = await self.queue.schedule(name)
            task = None if current is None or self.pgbaton_app is None else (
                self.pgbaton_app.tasks.get(current.task))
            defaults = run_now_job(task, None if current is None else current.args)
            await self.queue.run_schedule_now(name, by=by, defaults=defaults)
        else:
            await self.queue.remove_schedule(name, by=by)
        logger.info("dashboard: %s %s schedule %r", who, action, name)
        base = request.scope.get("root_path", "")
        return RedirectResponse(f"{base}/periodic?done={action}", status_code=303)

    async def _define_schedule(
        self, action: str, name: str, field: dict[str, str], by: str
    ) -> None:
        try:
            args = json.loads(field.get("args") or "{}")
        except (ValueError, RecursionError) as error:  # JSONDecodeError, 4,300 digits, depth
            raise InvalidArgument(f"args are not JSON this dashboard can read: "
                                  f"{str(error)[:200]}; nothing was written") from None
        if not isinstance(args, dict):
            raise InvalidArgument("args must be a JSON object; nothing was written")
        limit = field.get("catch_up_limit") or str(DEFAULT_CATCH_UP_LIMIT)
        if not (limit.isascii() and limit.isdigit() and len(limit) <= 9):
            raise InvalidArgument(f"catch-up limit must be a whole number, got {limit[:40]!r}")
        cron, task = field.get("cron", ""), field.get("task", "")
        options: dict[str, Any] = {
            "timezone": field.get("timezone") or "UTC",
            "catch_up": field.get("catch_up") or "skip", "catch_up_limit": int(limit),
            # Empty: the task's own (docs/schedules.md, the table).
            "queue": field.get("queue") or None,
            "priority": _optional_number(field, "priority", INT4_MIN),
            "max_attempts": _optional_number(field, "max_attempts", 1),
        }
        new = field.get("new") == "yes"
        if self.pgbaton_app is not None:
            check_task(self.pgbaton_app, task, args, new)
            new = True  # the App vouched for the task
        if action == "add":
            await self.queue.add_schedule(name, cron, task, args, new=new, by=by, **options)
        else:
            # The revision the form was opened at: a change someone saved since is not
            # overwritten (ScheduleChanged, a 409 that says so).
            if not field.get("revision"):
                raise params.BadInput("the edit form sent no revision: reload the "
                                      "periodic page and edit again; nothing was written")
            revision = params.whole_number("revision", field.get("revision"), minimum=1,
                                           maximum=INT8_MAX)
            await self.queue.update_schedule(name, new=new, by=by, cron=cron, task=task,
                                             args=args, revision=revision, **options)

    async def health(self, request: Request) -> Response:
        findings = await run_in_threadpool(_doctor, self.dsn, self.schema)
        return self.page(request, "health.html",
                          {"findings": findings, "status": overall(findings)})

    async def healthz(self, request: Request) -> Response:
        try:
            await self.store.ping()
        except (psycopg.Error, OSError) as error:
            return PlainTextResponse(f"database unreachable: {error}\n", status_code=503)
        return PlainTextResponse("ok\n")

    async def metrics(self, request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, self.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)


SCHEDULE_NOTICES = {
    "add": "Added: the leader enqueues its ticks from the next one on.",
    "edit": "Changed: the change holds from the next tick, on every worker.",
    "pause": "Paused: it enqueues nothing until resumed.",
    "resume": "Resumed: its ticks are enqueued again from the next one (none caught up).",
    "run-now": "Enqueued: its job runs now, besides its ticks.",
    "remove": "Removed: the jobs it enqueued stay.",
}

# How often an open job list asks for its tabs' counts again, at the least.
TABS_EVERY_SECONDS = 5.0

QUEUE_NOTICES = {
    "pause": "Paused: claims from now on take none of its jobs; running ones finish.",
    "resume": "Resumed: its jobs are claimed again.",
}


def _optional_number(field: dict[str, str], name: str, minimum: int) -> int | None:
    """A form's optional whole number: empty is None (the task's own)."""
    text = field.get(name) or ""
    if not text:
        return None
    return params.whole_number(name.replace("_", " "), text, minimum=minimum,
                               maximum=INT4_MAX)


def _still_held(job: Any) -> bool:
    """A cancelled job whose old handler may still run: its claim and lease are kept."""
    return bool(job.claim_token is not None and job.lease_until is not None
                and job.lease_until > dt.datetime.now(dt.UTC))


def _pretty(value: Any) -> str:
    """JSON as a person reads it; the template's autoescape makes it safe, not this."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


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


def _job_id(request: Request) -> int:
    text = request.path_params["job_id"]
    try:
        return check_job_id(int(text))
    except (ValueError, InvalidArgument):
        raise HTTPException(404) from None


def _doctor(dsn: str, schema: str) -> list[Any]:
    with _database.connect(dsn, autocommit=True,
                           application_name="pgbaton dashboard health") as conn:
        return run_checks(Inspection(conn, schema, Thresholds()))
