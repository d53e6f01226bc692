"""The hook around every enqueue: the shape tracing fills in, without the core knowing
OpenTelemetry.

An enqueue with a hook set (`events.enqueue_hook`, shared by an App's queues) runs
inside `hook(queue, count)`, a context manager whose value says which headers to store
in each job's `meta` column and is told the ids written. With no hook set, an enqueue
runs in a span that stores and tells nothing (enqueue_span). pgbaton.tracing is the
one hook pgbaton ships (docs/howto/dashboard-metrics-traces.md, "OpenTelemetry").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

from ._encoding import to_json


class EnqueueSpan(Protocol):
    """What a hook hands the enqueue it wraps."""

    @property
    def headers(self) -> Mapping[str, str]:
        """Headers for the `meta` of every job of this enqueue; empty: store none."""
        ...

    def sent(self, job_ids: Sequence[int]) -> None:
        """The ids the enqueue returned, in input order (after the statement ran)."""
        ...


# hook(queue, count): queue is the jobs' queue, or None when a batch spans several.
EnqueueHook = Callable[[str | None, int], AbstractContextManager[EnqueueSpan]]


def meta_json(span: EnqueueSpan) -> str | None:
    """The `meta` parameter of the insert statements: NULL when there is nothing to
    store (a tracer with no SDK behind it injects nothing), so such jobs cost nothing."""
    headers = span.headers
    return to_json(dict(headers), "job headers") if headers else None


class _NoSpan:
    """The span of an enqueue that no hook wraps: no headers, nothing told."""

    headers: Mapping[str, str] = {}

    def sent(self, job_ids: Sequence[int]) -> None:
        pass


_NO_SPAN = _NoSpan()


def enqueue_span(
    hook: EnqueueHook | None, queue: str | None, count: int
) -> AbstractContextManager[EnqueueSpan]:
    """The span every enqueue runs in: the hook's, or one that stores and tells nothing."""
    return nullcontext(_NO_SPAN) if hook is None else hook(queue, count)
