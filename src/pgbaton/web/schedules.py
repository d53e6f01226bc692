"""The schedules (/periodic: fire times, last jobs, the forms that change them) and the
App's tasks (/tasks: each with its args as JSON Schema)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..cron import CATCH_UP_POLICIES, DEFAULT_CATCH_UP_LIMIT
from ..errors import InvalidArgument
from ..limits import INT4_MAX, INT4_MIN, INT8_MAX
from ..schedules import check_task, run_now_job
from . import params
from .board import SCHEDULE_NOTICES, Board


class SchedulePages(Board):
    """GET /periodic and /tasks; POST /periodic/<action>."""

    async def periodic(self, request: Request) -> Response:
        """Every schedule of the table (docs/explanation/schedules.md): its next five
        fire times in its zone, its last job, its state; forms for full access."""
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
            # Empty: the task's own (docs/explanation/schedules.md, the table).
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


logger = logging.getLogger("pgbaton.web")


def _optional_number(field: dict[str, str], name: str, minimum: int) -> int | None:
    """A form's optional whole number: empty is None (the task's own)."""
    text = field.get(name) or ""
    if not text:
        return None
    return params.whole_number(name.replace("_", " "), text, minimum=minimum,
                               maximum=INT4_MAX)
