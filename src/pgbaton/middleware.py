"""Middleware: code that wraps every handler call the same way (tracing, timing,
logging context, error reporting).

A middleware is `async def middleware(context, call_next)`: it may look at the
JobContext, must await `call_next()` once to run the handler (or what the next
middleware wraps), and returns what that returned, or raises. It runs on the
worker's event loop for async and sync handlers alike; a sync handler runs in its
thread inside `call_next()`, with a copy of the context variables set before it.

    @app.middleware
    async def timed(context, call_next):
        started = time.perf_counter()
        try:
            return await call_next()
        finally:
            metrics.observe(context.claim.task, time.perf_counter() - started)

The first registered is the outermost. Timeouts, lost-claim cancellation and result
checks sit outside the whole chain: a timeout cancels the chain, not only the handler.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .context import JobContext

CallNext = Callable[[], Awaitable[Any]]
Middleware = Callable[[JobContext, CallNext], Awaitable[Any]]


def chain(middlewares: Sequence[Middleware], context: JobContext, call: CallNext) -> CallNext:
    """`call` wrapped by every middleware, the first outermost."""
    for middleware in reversed(middlewares):
        call = functools.partial(middleware, context, call)
    return call
