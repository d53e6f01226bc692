"""OpenTelemetry: a real worker's runs as CONSUMER spans, caught by the SDK's in-memory
exporter (the tracing module lives beside metrics; its tests beside theirs)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton.worker import Worker, WorkerConfig

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace",
                                reason="opentelemetry-sdk is a dev dependency")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode, get_current_span  # noqa: E402

from pgbaton import tracing  # noqa: E402


async def test_each_run_is_a_consumer_span(dsn: str, schema: str,
                                           db: psycopg.Connection[DictRow]) -> None:
    """Succeeded and failed runs: kind, name, messaging attributes, error.type; the
    handler (async and sync) runs inside its span."""
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = pgbaton.App(dsn, schema=schema)
    tracing.instrument(app, tracer_provider=provider)
    inside: dict[int, int] = {}

    @app.task(queue="mail", pass_context=True)
    async def send(ctx: pgbaton.JobContext) -> None:
        inside[ctx.job_id] = get_current_span().get_span_context().span_id

    @app.task(max_attempts=1, key="k-1", pass_context=True)
    def broken(ctx: pgbaton.JobContext) -> None:
        inside[ctx.job_id] = get_current_span().get_span_context().span_id
        raise KeyError("missing")

    app.queue.migrate()
    sent, failed = send.enqueue(), broken.enqueue()
    worker = Worker(app, WorkerConfig(maintenance=False, poll_interval=0.1))
    run = asyncio.create_task(worker.run())
    for _ in range(600):
        row = db.execute("SELECT count(*) AS n FROM jobs "
                         "WHERE status IN ('pending', 'running')").fetchone()
        if row is not None and row["n"] == 0:
            break
        await asyncio.sleep(0.05)
    worker.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    app.queue.close()
    spans = {int(s.attributes["messaging.message.id"]): s
             for s in exporter.get_finished_spans()}
    assert set(spans) == {sent, failed}
    ok, bad = spans[sent], spans[failed]
    assert (ok.name, ok.kind) == ("process mail", SpanKind.CONSUMER)
    assert dict(ok.attributes) == {
        "messaging.system": "pgbaton", "messaging.destination.name": "mail",
        "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.message.id": str(sent), "pgbaton.task": "send", "pgbaton.job.attempt": 1,
    }
    assert ok.status.status_code == StatusCode.UNSET
    assert bad.status.status_code == StatusCode.ERROR
    assert bad.attributes["error.type"] == "KeyError"
    assert bad.attributes["pgbaton.job.key"] == "k-1"
    assert [e.name for e in bad.events] == ["exception"]
    assert inside == {sent: ok.context.span_id, failed: bad.context.span_id}
