"""The event loop a worker process runs on (`WorkerConfig.event_loop`, `pgbaton worker
--loop`).

"auto", the default, is uvloop where it is installed (a dependency of pgbaton on Linux
and macOS) and asyncio's own loop elsewhere. A worker spends much of its own CPU in the
loop's machinery (a task per job, a wait on a socket per statement); uvloop does that
part in C, and at concurrency 32 it cut the worker's CPU per job by about a tenth (the
drain's rate, which the server bounds on two cores, did not move beyond the noise:
docs/explanation/performance.md, "The worker's event loop"). Handlers run as before
(async ones on the loop, sync ones in its thread pool), but a handler that uses the
loop's own API meets uvloop's differences (the same section lists them): "asyncio" is
the way back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..errors import InvalidArgument

T = TypeVar("T")

EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop `choice` names (None: asyncio's own). "uvloop" without the
    package installed is refused with how to get it; "auto" then falls back quietly."""
    if choice not in EVENT_LOOPS:
        raise InvalidArgument(
            f"event_loop must be one of {', '.join(map(repr, EVENT_LOOPS))}, got {choice!r}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise InvalidArgument(
                "event_loop 'uvloop' needs the uvloop package, which is not installed "
                "(pip install uvloop; it has no build for Windows): use 'auto' or "
                "'asyncio'") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name(choice: str) -> str:
    """What `choice` runs on here: "uvloop" or "asyncio"."""
    return "asyncio" if loop_factory(choice) is None else "uvloop"


def runner(choice: str) -> asyncio.Runner:
    """An asyncio.Runner on the loop `choice` names."""
    return asyncio.Runner(loop_factory=loop_factory(choice))


def run(main: Coroutine[Any, Any, T], choice: str) -> T:
    """asyncio.run(main) on the loop `choice` names."""
    with runner(choice) as on_loop:
        return on_loop.run(main)
