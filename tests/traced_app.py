"""The App a `pgbaton worker` process runs in the tracing tests: the OpenTelemetry SDK,
with every finished span written as one JSON line to $PGBATON_TRACE_FILE."""

from __future__ import annotations

import os

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import pgbaton
from pgbaton import tracing

app = pgbaton.App(schema=os.environ.get("PGBATON_TEST_SCHEMA", "pgbaton"))


def _one_line(span: ReadableSpan) -> str:
    return span.to_json(indent=None) + "\n"


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
    out=open(os.environ["PGBATON_TRACE_FILE"], "a"),  # noqa: SIM115 (open for the process)
    formatter=_one_line,
)))
tracing.instrument(app, tracer_provider=provider)


@app.task(queue="mail")
def send_receipt(order_id: int) -> None:
    """Succeeds."""


@app.task(queue="mail", max_attempts=2, retry=lambda attempt: 0.0, pass_context=True)
def flaky(ctx: pgbaton.JobContext, order_id: int) -> None:
    """Fails its first attempt, succeeds its second."""
    if ctx.attempt == 1:
        raise ConnectionError("the mail server hung up")
