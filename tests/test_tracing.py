"""OpenTelemetry: a real worker's runs as CONSUMER spans, caught by the SDK's in-memory
exporter (the tracing module lives beside metrics; its tests beside theirs)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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
from opentelemetry.trace import (  # noqa: E402
    NoOpTracerProvider,
    SpanKind,
    StatusCode,
    get_current_span,
)

from pgbaton import tracing  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


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


def _spans_of_worker(dsn: str, schema: str, trace_file: Path,
                     db: psycopg.Connection[DictRow], jobs: int) -> list[dict[str, Any]]:
    """Run `pgbaton worker tests.traced_app:app` in a process of its own until
    `jobs` jobs are done; the spans it exported, one dict each."""
    env = {**os.environ, "PGBATON_DSN": dsn, "PGBATON_TEST_SCHEMA": schema,
           "PGBATON_TRACE_FILE": str(trace_file), "PYTHONPATH": str(ROOT)}
    log = trace_file.with_suffix(".log")
    with log.open("wb") as output:
        worker = subprocess.Popen(
            [sys.executable, "-m", "pgbaton", "worker", "tests.traced_app:app",
             "--schema", schema], stdout=output, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while True:
            row = db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'done'").fetchone()
            if row is not None and row["n"] == jobs:
                break
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"jobs not done in 60 s: {log.read_text()}"
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    return [json.loads(line) for line in trace_file.read_text().splitlines()]


def _hex(number: int, digits: int) -> str:
    return f"0x{number:0{digits}x}"


def test_a_run_continues_the_trace_of_its_enqueue(
        dsn: str, schema: str, db: psycopg.Connection[DictRow], tmp_path: Path) -> None:
    """Jobs enqueued inside a request's span (one, once, a batch) and run by a worker in
    another process: each run's CONSUMER span is in the request's trace, a child of the
    job's PRODUCER span and linked to it, every attempt of a retried job too; only the
    database carried the context between the two processes."""
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = pgbaton.App(dsn, schema=schema)
    tracing.instrument(app, tracer_provider=provider)
    app.queue.migrate()
    with provider.get_tracer("shop").start_as_current_span("POST /orders") as request:
        one = app.queue.enqueue("send_receipt", {"order_id": 1}, queue="mail")
        once = app.queue.enqueue_once("send_receipt", {"order_id": 2}, queue="mail",
                                      idempotency_key="order-2")
        again = app.queue.enqueue_once("send_receipt", {"order_id": 2}, queue="mail",
                                       idempotency_key="order-2")
        batch = app.queue.enqueue_many(
            [{"task": "send_receipt", "args": {"order_id": n}, "queue": "mail"}
             for n in (3, 4, 5)])
        flaky = app.queue.enqueue("flaky", {"order_id": 6}, queue="mail")
    app.queue.close()
    assert again.id == once.id and not again.created

    sends = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.PRODUCER]
    assert [s.name for s in sends] == ["send mail"] * 5
    assert all(s.parent is not None and s.parent.span_id == request.get_span_context().span_id
               for s in sends)
    # the second enqueue_once found the job and wrote nothing: its span is not the job's
    one_send, once_send, _, batch_send, flaky_send = sends
    assert one_send.attributes is not None and dict(one_send.attributes) == {
        "messaging.system": "pgbaton", "messaging.destination.name": "mail",
        "messaging.operation.type": "send", "messaging.operation.name": "send",
        "messaging.message.id": str(one),
    }
    assert batch_send.attributes is not None
    assert batch_send.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in batch_send.attributes
    producer_of = {one: one_send, once.id: once_send, flaky: flaky_send,
                   **{job_id: batch_send for job_id in batch}}

    trace_id = request.get_span_context().trace_id
    stored = {row["id"]: row["meta"] for row in db.execute("SELECT id, meta FROM jobs")}
    for job_id, send in producer_of.items():
        assert stored[job_id] == {
            "traceparent": f"00-{trace_id:032x}-{send.context.span_id:016x}-"
                           f"{int(send.context.trace_flags):02x}"}

    runs = _spans_of_worker(dsn, schema, tmp_path / "spans.jsonl", db, jobs=len(producer_of))
    assert all(run["kind"] == "SpanKind.CONSUMER" for run in runs)
    by_job: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        by_job.setdefault(int(run["attributes"]["messaging.message.id"]), []).append(run)
    assert sorted(by_job) == sorted(producer_of)
    for job_id, send in producer_of.items():
        for run in by_job[job_id]:
            assert run["context"]["trace_id"] == _hex(trace_id, 32)
            assert run["parent_id"] == _hex(send.context.span_id, 16)
            assert [link["context"]["span_id"] for link in run["links"]] == [
                _hex(send.context.span_id, 16)]
    first, second = sorted(by_job[flaky],
                           key=lambda run: int(run["attributes"]["pgbaton.job.attempt"]))
    assert [run["attributes"]["pgbaton.job.attempt"] for run in (first, second)] == [1, 2]
    assert first["status"]["status_code"] == "ERROR"
    assert first["attributes"]["error.type"] == "ConnectionError"
    assert second["status"]["status_code"] == "UNSET"
    assert [len(by_job[job_id]) for job_id in (one, once.id, *batch)] == [1] * 5


async def test_without_an_sdk_nothing_is_stored(
        dsn: str, schema: str, db: psycopg.Connection[DictRow]) -> None:
    """Instrumented, but with the API's no-op provider (no SDK configured): enqueues of
    every kind, sync and async, store no trace context (meta stays NULL)."""
    app = pgbaton.App(dsn, schema=schema)
    tracing.instrument(app, tracer_provider=NoOpTracerProvider())
    app.queue.migrate()
    app.queue.enqueue("t", {"n": 1})
    app.queue.enqueue_once("t", {"n": 2}, idempotency_key="k")
    app.queue.enqueue_many([{"task": "t"}, {"task": "t", "queue": "other"}])
    await app.async_queue.enqueue("t", {"n": 3})
    await app.async_queue.enqueue_many([{"task": "t"}])
    app.queue.close()
    await app.async_queue.close()
    row = db.execute("SELECT count(*) AS jobs, count(meta) AS with_meta FROM jobs").fetchone()
    assert row == {"jobs": 6, "with_meta": 0}


async def test_a_failed_enqueue_is_an_error_span(
        dsn: str, schema: str, db: psycopg.Connection[DictRow]) -> None:
    """An enqueue whose statement fails ends its PRODUCER span in ERROR, with the
    exception and error.type; the async enqueue is traced as the sync one is."""
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = pgbaton.App(dsn, schema=schema)
    tracing.instrument(app, tracer_provider=provider)
    await app.async_queue.migrate()
    ok = await app.async_queue.enqueue("t", queue="q1")
    mixed = await app.async_queue.enqueue_many([{"task": "t"}, {"task": "t", "queue": "q2"}])
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            await conn.execute("SELECT 1/0")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):  # the caller's, aborted
            await app.async_queue.enqueue("t", queue="q1", conn=conn)
    await app.async_queue.close()
    good, batch, bad = exporter.get_finished_spans()
    assert good.attributes is not None and good.attributes["messaging.message.id"] == str(ok)
    assert (batch.name, batch.kind) == ("send", SpanKind.PRODUCER)
    assert batch.attributes is not None
    assert "messaging.destination.name" not in batch.attributes
    assert batch.attributes["messaging.batch.message_count"] == len(mixed) == 2
    assert bad.status.status_code == StatusCode.ERROR
    assert bad.attributes is not None
    assert bad.attributes["error.type"] == "InFailedSqlTransaction"
    assert [e.name for e in bad.events] == ["exception"]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 3}


async def test_a_run_without_a_usable_context_starts_its_own_trace(
        dsn: str, schema: str, db: psycopg.Connection[DictRow]) -> None:
    """Jobs whose meta holds no context, a garbled one, or one of the wrong type (an
    old producer's, or written by hand) still run, each in a trace of its own: no
    parent, no link."""
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = pgbaton.App(dsn, schema=schema)
    tracing.instrument(app, tracer_provider=provider)

    @app.task
    async def plain(n: int) -> None:
        return None

    app.queue.migrate()
    metas = [None, {}, {"traceparent": "00-garbage-01"}, {"traceparent": 7},
             {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}]
    for n, meta in enumerate(metas):
        db.execute("INSERT INTO jobs (task, args, meta) VALUES ('plain', %s, %s)",
                   (json.dumps({"n": n}), None if meta is None else json.dumps(meta)))
    worker = Worker(app, WorkerConfig(maintenance=False, poll_interval=0.1))
    run = asyncio.create_task(worker.run())
    for _ in range(600):
        row = db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'done'").fetchone()
        if row is not None and row["n"] == len(metas):
            break
        await asyncio.sleep(0.05)
    worker.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    app.queue.close()
    spans = exporter.get_finished_spans()
    assert len(spans) == len(metas)
    assert all(s.parent is None and not s.links for s in spans)
    assert len({s.context.trace_id for s in spans}) == len(metas)
