"""OpenTelemetry traces: a CONSUMER span around each run of a job.

    pgbaton.tracing.instrument(app)   # once, before the worker starts

Each attempt is one span named `process <queue>`, of kind CONSUMER, following the
OpenTelemetry messaging semantic conventions: messaging.system "pgbaton",
messaging.destination.name the queue, messaging.operation.type and .name "process",
messaging.message.id the job id; pgbaton.task, pgbaton.job.attempt and, when the job
has one, pgbaton.job.key. An attempt that raises records the exception, sets the span's
status to ERROR and error.type to the exception's class. The span is current while the
handler runs (sync handlers too: their thread gets a copy of the context), so spans the
handler makes are its children.

Needs the extra `pgbaton[otel]` (opentelemetry-api); export with the SDK you configure.
Not yet here: a PRODUCER span on enqueue and the trace context carried inside the job,
which need a hook in enqueue and a column in the jobs table (docs/dashboard.md).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode, TracerProvider

from .app import App
from .context import JobContext
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


def instrument(app: App, tracer_provider: TracerProvider | None = None) -> Middleware:
    """Trace every run of the App's jobs; returns the middleware it registered (the
    outermost when registered first, so its span covers the other middleware too)."""
    tracer = trace.get_tracer("pgbaton", tracer_provider=tracer_provider)

    async def process_span(context: JobContext, call_next: CallNext) -> Any:
        with tracer.start_as_current_span(
            f"process {context.claim.queue}", kind=SpanKind.CONSUMER,
            attributes=process_attributes(context),
            record_exception=False, set_status_on_exception=False,
        ) as span:
            try:
                return await call_next()
            except BaseException as error:
                span.record_exception(error)
                span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}")
                span.set_attribute("error.type", type(error).__qualname__)
                raise

    app.middleware(process_span)
    return process_span
