"""pgbaton.web: the dashboard, an ASGI app to serve alone or mount in yours.

    app.py       create_app: the Starlette app and its route table; Gate, before any route
    board.py     Board: what every page stands on (state, rendering, the guard, ERRORS)
    overview.py, jobs.py, queues.py, schedules.py, health.py
                 each page's handlers, a class over Board; app.Dashboard is all of them
    security.py  who may do what (token, basic auth, a resolver), CSRF, the bind rule
    params.py    query parameters and form fields to a JobFilter, a page, an action
    store.py     the dashboard's reads, every one a named statement of sql/dashboard.sql
    charts.py    the overview's charts, drawn here as SVG
    live.py      the live overview: one LISTEN connection fanned out as server-sent events
    command.py   `pgbaton dashboard`, `pgbaton metrics` and the bulk forms of retry/cancel

Needs the extra `pgbaton[web]` (Starlette, uvicorn, Jinja2, prometheus-client). The
command line imports this package without it, so the app is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .security import Access

__all__ = ["Access", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "Access":
        from .security import Access

        return Access
    raise AttributeError(f"module 'pgbaton.web' has no attribute {name!r}")
