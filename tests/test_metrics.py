"""Prometheus metrics: counters fed by a real worker's events, gauges read from SQL,
both scraped over HTTP and parsed with prometheus-client's own text parser."""

from __future__ import annotations

import asyncio
import socket
import urllib.request

import psycopg
from prometheus_client.parser import text_string_to_metric_families
from psycopg.rows import DictRow
from starlette.testclient import TestClient

import pgbaton
from pgbaton import metrics
from pgbaton.worker import Worker, WorkerConfig
from tests.web.conftest import Jobs, _testclient_host, client, jobs

__all__ = ["_testclient_host", "client", "jobs"]  # the dashboard's fixtures, reused


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def test_dashboard_metrics_are_the_queue_gauges_from_sql(
        client: TestClient, jobs: Jobs, db: psycopg.Connection[DictRow]) -> None:
    """/metrics parses, and its gauges equal what SQL counts."""
    answer = client.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    found = samples(answer.text)
    for row in db.execute("SELECT queue, status, count(*) AS n FROM jobs "
                          "WHERE status IN ('running', 'failed') GROUP BY 1, 2"):
        key = ("pgbaton_queue_jobs", (("queue", row["queue"]), ("state", row["status"])))
        assert found[key] == row["n"]
    assert found[("pgbaton_queue_jobs", (("queue", "reports"), ("state", "scheduled")))] == 2
    assert found[("pgbaton_queue_jobs", (("queue", "mail"), ("state", "pending")))] == 1
    assert ("pgbaton_queue_oldest_pending_seconds", (("queue", "mail"),)) in found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_worker_serves_its_counters(dsn: str, schema: str,
                                            db: psycopg.Connection[DictRow]) -> None:
    """metrics.serve(app, port): a real worker's outcomes and timings, scraped."""
    app = pgbaton.App(dsn, schema=schema)

    @app.task(max_attempts=1)
    async def fine(n: int) -> None:
        return None

    @app.task(max_attempts=1)
    async def broken() -> None:
        raise ValueError("no")

    @app.task
    async def later() -> None:
        raise pgbaton.Snooze(3600)

    @app.task
    async def hopeless() -> None:
        raise pgbaton.Discard("never")

    app.queue.migrate()
    port = free_port()
    server, thread, _ = metrics.serve(app, port)
    try:
        for n in range(3):
            fine.enqueue({"n": n})
        broken.enqueue()
        later.enqueue()
        hopeless.enqueue()
        worker = Worker(app, WorkerConfig(maintenance=False, poll_interval=0.1))
        run = asyncio.create_task(worker.run())
        for _ in range(600):
            left = db.execute("SELECT count(*) AS n FROM jobs "
                              "WHERE status = 'running' OR "
                              "(status = 'pending' AND run_at <= now())").fetchone()
            if left is not None and left["n"] == 0:
                break
            await asyncio.sleep(0.05)
        worker.request_stop()
        assert await asyncio.wait_for(run, 30) == 0
        assert app.events.flush(10)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
            found = samples(page.read().decode())
    finally:
        server.shutdown()
        thread.join(10)
        app.queue.close()
    fine_labels = (("outcome", "succeeded"), ("queue", "default"), ("task", "fine"))
    assert found[("pgbaton_jobs_total", fine_labels)] == 3
    broken_labels = (("outcome", "failed"), ("queue", "default"), ("task", "broken"))
    assert found[("pgbaton_jobs_total", broken_labels)] == 1
    for task, outcome in (("later", "snoozed"), ("hopeless", "discarded")):
        labels = (("outcome", outcome), ("queue", "default"), ("task", task))
        assert found[("pgbaton_jobs_total", labels)] == 1
    assert found[("pgbaton_job_run_seconds_count",
                  (("queue", "default"), ("task", "fine")))] == 3
    assert found[("pgbaton_job_queue_seconds_count",
                  (("queue", "default"), ("task", "fine")))] == 3


def test_the_subscriber_counts_maintenance_and_lost_claims() -> None:
    """Reaped leases, lost claims and leader changes, from events as the worker sends."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    subscriber = metrics.JobMetrics(registry)
    subscriber(pgbaton.Event("job.reaped", detail={"count": 4}))
    subscriber(pgbaton.Event("job.lost", task="t", queue="q", job_id=1))
    subscriber(pgbaton.Event("leader.elected"))
    subscriber(pgbaton.Event("leader.lost"))
    subscriber(pgbaton.Event("job.timed_out", task="t", queue="q"))
    found = samples(generate_latest(registry).decode())
    assert found[("pgbaton_leases_reaped_total", ())] == 4
    assert found[("pgbaton_claims_lost_total", (("queue", "q"), ("task", "t")))] == 1
    assert found[("pgbaton_leader_changes_total", (("change", "elected"),))] == 1
    assert found[("pgbaton_leader_changes_total", (("change", "lost"),))] == 1
    assert found[("pgbaton_job_timeouts_total", (("queue", "q"), ("task", "t")))] == 1


def test_the_documented_metrics_are_the_exported_ones(client: TestClient, jobs: Jobs) -> None:
    """docs/howto/dashboard-metrics-traces.md's Prometheus table lists exactly the
    metrics pgbaton exports, with their types and labels, named as Prometheus asks
    (snake case, `_total` counters, `_seconds` for times)."""
    import re
    from pathlib import Path

    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    subscriber = metrics.JobMetrics(registry)
    for name in (*metrics.OUTCOMES, "job.timed_out", "job.reaped", "leader.elected"):
        subscriber(pgbaton.Event(name, task="t", queue="q", run_time=0.1))
    subscriber(pgbaton.Event("job.started", task="t", queue="q", queue_time=0.1))
    exported: dict[str, tuple[str, set[str]]] = {}
    for text in (generate_latest(registry).decode(), client.get("/metrics").text):
        for family in text_string_to_metric_families(text):
            if family.name.endswith("_created"):  # prometheus-client's creation times
                continue
            name = family.name + ("_total" if family.type == "counter" else "")
            labels = {label for s in family.samples for label in s.labels} - {"le"}
            exported[name] = (family.type, labels)
    doc = (Path(__file__).resolve().parents[1] / "docs" / "howto"
           / "dashboard-metrics-traces.md").read_text()
    section = doc.split("## Prometheus", 1)[1].split("\n## ", 1)[0]
    documented = {
        name: (kind, {label.strip() for label in re.sub(r"\([^)]*\)", "", labels).split(",")
                      if label.strip()})
        for name, kind, labels in re.findall(r"^\| `(\w+)` \| (\w+) \|([^|]*)\|",
                                             section, re.MULTILINE)
    }
    assert documented == exported
    for name, (kind, _) in exported.items():
        assert re.fullmatch(r"pgbaton_[a-z_]+", name)
        assert name.endswith("_total") == (kind == "counter")
        assert kind != "histogram" or name.endswith("_seconds")
