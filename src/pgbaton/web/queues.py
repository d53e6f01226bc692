"""The queues (/queues: counts and flow settings, pause and resume) and the workers that
serve them (/workers)."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..worker.presence import STALE_SECONDS
from .board import Board


class QueuePages(Board):
    """GET /queues and /workers; POST /queues/<action>."""

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
        """Pause or resume one queue (docs/explanation/flow_control.md); the name is a
        form field, since a queue name may hold any character."""
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
        """Every worker of the workers table, idle ones too
        (docs/howto/dashboard-metrics-traces.md, "Workers"), and those holding jobs that
        the table does not know (a previous release's workers)."""
        rows = await self.store.workers(STALE_SECONDS)
        known = {row["worker_id"] for row in rows}
        holders = [w for w in await self.store.fetch("dashboard_workers")
                   if w["worker_id"] not in known]
        return self.page(request, "workers.html", {
            "workers": rows, "holders": holders, "stale_after": STALE_SECONDS,
            "live": sum(1 for row in rows if row["live"]),
        })


logger = logging.getLogger("pgbaton.web")


QUEUE_NOTICES = {
    "pause": "Paused: claims from now on take none of its jobs; running ones finish.",
    "resume": "Resumed: its jobs are claimed again.",
}
