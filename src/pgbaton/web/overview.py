"""The overview (/) and its live stream (/live): queues, workers and the leader at a
glance, redrawn by server-sent events as jobs move."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .board import Board
from .live import sse


class OverviewPages(Board):
    """GET / and /live."""

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
