"""OpenTelemetry traces across the queue: a PRODUCER span on each enqueue, a CONSUMER
span around each run of a job, and the trace context carried inside the job between them.

    pgbaton.tracing.instrument(app)   # once, before enqueueing or starting the worker

Following the OpenTelemetry messaging semantic conventions
(docs/howto/dashboard-metrics-traces.md, "OpenTelemetry", says where and why pgbaton
chooses among what they allow):

- enqueue, enqueue_once and enqueue_many run inside a span `send <queue>` of kind
  PRODUCER (messaging.operation.type and .name "send", messaging.message.id for one job,
  messaging.batch.message_count for a batch; a batch over several queues is named
  `send`). Its context is the creation context of every job it writes: the configured
  propagator (W3C traceparent and tracestate by default) injects it into the job's `meta`
  column, in the caller's transaction.
- Each attempt is one span `process <queue>` of kind CONSUMER whose parent is the
  producer's context and which also links to it, so the run sits in the trace of the
  request that enqueued it, on whichever host and however later; every retry too.
  Attributes: messaging.system "pgbaton", messaging.destination.name the queue,
  messaging.operation.type and .name "process", messaging.message.id the job id,
  pgbaton.task, pgbaton.job.attempt and, when the job has one, pgbaton.job.key. An
  attempt that raises records the exception, sets the status to ERROR and error.type to
  the exception's class. The span is current while the handler runs (sync handlers too:
  their thread gets a copy of the context), so spans the handler makes are its children.

With no SDK configured the API's spans record nothing and inject nothing, and a job's
`meta` stays NULL. Needs the extra `pgbaton[otel]` (opentelemetry-api).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, StatusCode, Tracer, TracerProvider

from .app import App
from .context import JobContext
from .enqueue_hook import EnqueueHook, EnqueueSpan
from .events import Events
from .middleware import CallNext, Middleware

SYSTEM = "pgbaton"


def process_attributes(context: JobContext) -> dict[str, Any]:
    """The span attributes of one run of a job."""
    claim = context.claim
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": claim.queue,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.id": str(claim.id),
        "pgbaton.task": claim.task,
        "pgbaton.job.attempt": claim.attempts,
    }
    if claim.key is not None:
        attributes["pgbaton.job.key"] = claim.key
    return attributes


def send_attributes(queue: str | None, count: int) -> dict[str, Any]:
    """The span attributes of one enqueue (count > 1: enqueue_many)."""
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
    }
    if queue is not None:
        attributes["messaging.destination.name"] = queue
    if count > 1:
        attributes["messaging.batch.message_count"] = count
    return attributes


def _record_error(span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}")
    span.set_attribute("error.type", type(error).__qualname__)


class _SendSpan:
    """One enqueue's span, as the queue sees it (enqueue_hook.EnqueueSpan)."""

    __slots__ = ("_count", "_span", "headers")

    def __init__(self, span: Span, headers: dict[str, str], count: int) -> None:
        self.headers = headers
        self._span = span
        self._count = count

    def sent(self, job_ids: Sequence[int]) -> None:
        if self._count == 1 and job_ids:
            self._span.set_attribute("messaging.message.id", str(job_ids[0]))


def enqueue_hook(tracer: Tracer) -> EnqueueHook:
    """The hook that wraps each enqueue in a PRODUCER span and stores its context."""

    @contextmanager
    def send_span(queue: str | None, count: int) -> Iterator[EnqueueSpan]:
        with tracer.start_as_current_span(
            f"send {queue}" if queue is not None else "send", kind=SpanKind.PRODUCER,
            attributes=send_attributes(queue, count),
            record_exception=False, set_status_on_exception=False,
        ) as span:
            headers: dict[str, str] = {}
            if span.get_span_context().is_valid:  # the API alone: nothing to carry
                propagate.inject(headers)
            try:
                yield _SendSpan(span, headers, count)
            except BaseException as error:
                _record_error(span, error)
                raise

    return send_span


def _creation_context(meta: Mapping[str, Any] | None) -> tuple[Any, list[Link]]:
    """The producer's context stored in a job, as (parent context, links)."""
    if not meta:
        return None, []
    carrier = {name: value for name, value in meta.items() if isinstance(value, str)}
    parent = propagate.extract(carrier)
    producer = trace.get_current_span(parent).get_span_context()
    if not producer.is_valid:
        return None, []
    return parent, [Link(producer)]


def instrument_events(events: Events, tracer_provider: TracerProvider | None = None) -> None:
    """Trace the enqueues of every queue sharing `events` (a bare Queue's: queue.events)."""
    tracer = trace.get_tracer("pgbaton", tracer_provider=tracer_provider)
    events.enqueue_hook = enqueue_hook(tracer)


def instrument(app: App, tracer_provider: TracerProvider | None = None) -> Middleware:
    """Trace the App's enqueues and every run of its jobs; returns the middleware it
    registered (the outermost when registered first, so its span covers the other
    middleware too)."""
    tracer = trace.get_tracer("pgbaton", tracer_provider=tracer_provider)
    app.events.enqueue_hook = enqueue_hook(tracer)

    async def process_span(context: JobContext, call_next: CallNext) -> Any:
        parent, links = _creation_context(context.claim.meta)
        with tracer.start_as_current_span(
            f"process {context.claim.queue}", context=parent, kind=SpanKind.CONSUMER,
            attributes=process_attributes(context), links=links,
            record_exception=False, set_status_on_exception=False,
        ) as span:
            try:
                return await call_next()
            except BaseException as error:
                _record_error(span, error)
                raise

    app.middleware(process_span)
    return process_span
