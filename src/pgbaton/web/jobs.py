"""The jobs: the list (/jobs, its filters and state tabs), one job (/jobs/<id>) and the
action on it, and the bulk actions over a filter (/jobs/bulk)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from typing import Any

import psycopg
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .._checks import check_job_id
from ..actions import ACTIONS, BY_NAME, offered
from ..errors import InvalidArgument
from ..limits import INT8_MAX
from ..models import STATES
from . import params, store
from .board import Board


class JobPages(Board):
    """GET /jobs, /jobs/<id> and /jobs/bulk; POST /jobs/<id>/<action> and /jobs/bulk."""

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
            "all_query": params.encode(others), "cap": store.STATE_COUNT_CAP,
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
            # worker hears: at once by notification, or at its next heartbeat when it
            # does not listen (as `pgbaton cancel` says).
            notice = (f"The job was cancelled; its handler on {found.worker_id or 'its worker'}"
                      " is told to stop at once (at that worker's next heartbeat if it does"
                      " not listen), and holds the job's key until it lets go.")
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


logger = logging.getLogger("pgbaton.web")


# How often an open job list asks for its tabs' counts again, at the least.
TABS_EVERY_SECONDS = 5.0


def _still_held(job: Any) -> bool:
    """A cancelled job whose old handler may still run: its claim and lease are kept."""
    return bool(job.claim_token is not None and job.lease_until is not None
                and job.lease_until > dt.datetime.now(dt.UTC))


def _job_id(request: Request) -> int:
    text = request.path_params["job_id"]
    try:
        return check_job_id(int(text))
    except (ValueError, InvalidArgument):
        raise HTTPException(404) from None
