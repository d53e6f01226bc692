"""Prometheus metrics: counters and histograms fed by the events API, gauges read from
SQL at scrape time.

    instrument(app)      subscribe to an App's events: pgbaton_jobs_total{task,queue,
                         outcome}, pgbaton_job_queue_seconds, pgbaton_job_run_seconds,
                         pgbaton_claims_lost_total, pgbaton_leases_reaped_total,
                         pgbaton_leader_changes_total{change}
    QueueCollector       pgbaton_queue_jobs{queue,state}, pgbaton_queue_oldest_pending_seconds,
                         pgbaton_queue_expired_leases: one cheap statement per scrape
                         (dashboard_queue_counts, which reads the partial indexes only)
    serve(app, port)     both, on an HTTP endpoint of their own (a worker's --metrics-port)

Counters count what this process saw: a worker's own jobs. Gauges describe the whole
queue, so scrape them from one process (the dashboard, `pgbaton metrics`), not every
worker. Needs prometheus-client (the extra `pgbaton[web]` or `pgbaton[metrics]`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from . import _sql
from .dsn import CLIENT_ENCODING
from .events import Event

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from .app import App

OUTCOMES = {
    "job.succeeded": "succeeded",
    "job.failed": "failed",
    "job.retried": "retried",
    "job.lost": "lost",
    "job.released": "released",
    "job.cancelled": "cancelled",
    "job.snoozed": "snoozed",  # a handler's Snooze: the attempt is not counted
    "job.discarded": "discarded",  # a handler's Discard: failed at once
}
# Seconds: from a millisecond to a day, for queue time and run time alike.
BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900,
           3600, 86400)
EVENT_NAMES = (*OUTCOMES, "job.started", "job.timed_out", "job.reaped", "leader.elected",
               "leader.lost")


class JobMetrics:
    """An events subscriber that keeps pgbaton's counters and histograms."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.jobs = Counter(
            "pgbaton_jobs", "Job attempts that ended, by outcome.",
            ["task", "queue", "outcome"], registry=registry,
        )
        self.timeouts = Counter(
            "pgbaton_job_timeouts", "Handlers that ran past their task's timeout.",
            ["task", "queue"], registry=registry,
        )
        self.queue_time = Histogram(
            "pgbaton_job_queue_seconds", "Seconds from a job's run_at to its handler's start.",
            ["task", "queue"], buckets=BUCKETS, registry=registry,
        )
        self.run_time = Histogram(
            "pgbaton_job_run_seconds", "Seconds a handler ran.",
            ["task", "queue"], buckets=BUCKETS, registry=registry,
        )
        self.lost = Counter(
            "pgbaton_claims_lost", "Claims found taken by another worker or cancelled.",
            ["task", "queue"], registry=registry,
        )
        self.reaped = Counter(
            "pgbaton_leases_reaped", "Expired leases the reaper handed back.",
            registry=registry,
        )
        self.leader = Counter(
            "pgbaton_leader_changes", "Times this process became or stopped being leader.",
            ["change"], registry=registry,
        )

    def __call__(self, event: Event) -> None:
        task, queue = event.task or "", event.queue or ""
        if event.name in OUTCOMES:
            self.jobs.labels(task, queue, OUTCOMES[event.name]).inc(event.count)
            if event.run_time is not None:
                self.run_time.labels(task, queue).observe(event.run_time)
            if event.name == "job.lost":
                self.lost.labels(task, queue).inc(event.count)
        elif event.name == "job.started" and event.queue_time is not None:
            self.queue_time.labels(task, queue).observe(event.queue_time)
        elif event.name == "job.timed_out":
            self.timeouts.labels(task, queue).inc()
        elif event.name == "job.reaped":
            self.reaped.inc((event.detail or {}).get("count", event.count))
        elif event.name in ("leader.elected", "leader.lost"):
            self.leader.labels(event.name.removeprefix("leader.")).inc()


class QueueCollector(Collector):
    """Gauges of the whole queue, read at scrape time in one statement."""

    def __init__(self, dsn: str, schema: str = "pgbaton") -> None:
        self._dsn = dsn
        self._query = _sql.queries(schema)["dashboard_queue_counts"]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily(
            "pgbaton_queue_jobs", "Jobs by queue and state (pending = due now).",
            labels=["queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "pgbaton_queue_oldest_pending_seconds", "Age of the oldest due pending job.",
            labels=["queue"],
        )
        expired = GaugeMetricFamily(
            "pgbaton_queue_expired_leases", "Running jobs past their lease, not reaped yet.",
            labels=["queue"],
        )
        paused_gauge = GaugeMetricFamily(
            "pgbaton_queue_paused", "1 while the queue is paused (none of its jobs claimed).",
            labels=["queue"],
        )
        with psycopg.connect(self._dsn, autocommit=True,
                             application_name="pgbaton metrics",
                             client_encoding=CLIENT_ENCODING) as conn:
            rows: list[tuple[Any, ...]] = conn.execute(self._query).fetchall()
        for (queue, paused, pending, scheduled, running, failed, oldest_age,
             expired_leases) in rows:
            paused_gauge.add_metric([queue], 1.0 if paused else 0.0)
            for state, count in (("pending", pending), ("scheduled", scheduled),
                                 ("running", running), ("failed", failed)):
                jobs.add_metric([queue, state], count)
            oldest.add_metric([queue], oldest_age or 0.0)
            expired.add_metric([queue], expired_leases)
        yield from (jobs, oldest, expired, paused_gauge)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # no query at registration time


def instrument(app: App, registry: CollectorRegistry) -> JobMetrics:
    """Count the App's events into registry; returns the subscriber."""
    metrics = JobMetrics(registry)
    app.subscribe(metrics, EVENT_NAMES)
    return metrics


def serve(
    app: App, port: int, *, addr: str = "127.0.0.1", queue_gauges: bool = False,
) -> tuple[WSGIServer, threading.Thread, CollectorRegistry]:
    """Serve the App's metrics on addr:port (a worker's --metrics-port), from a thread
    of prometheus-client's. queue_gauges=True adds the SQL gauges of QueueCollector."""
    registry = CollectorRegistry()
    instrument(app, registry)
    if queue_gauges:
        registry.register(QueueCollector(app.dsn, app.schema))
    server, thread = start_http_server(port, addr=addr, registry=registry)
    return server, thread, registry
