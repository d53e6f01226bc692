"""`pgbaton worker --metrics-port` serves the worker's own counters for Prometheus."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from tests import app_under_test as tasks
from tests.worker_processes import scalar, wait_until

parser = pytest.importorskip("prometheus_client.parser", reason="needs pgbaton[web]")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_worker_metrics_port_counts_its_jobs(start_worker, db, app_schema):
    """After two jobs succeed and one fails for good, the worker's endpoint says so."""
    port = free_port()
    worker = start_worker("--metrics-port", str(port), "--no-maintenance",
                          "--poll-interval", "0.2")
    ids = [tasks.work.enqueue({"seconds": 0}) for _ in range(2)]
    failing = tasks.always_fails.enqueue({"n": 5})
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status"
                              " IN ('done', 'failed')", [*ids, failing]) == 3, 30, "jobs ended")

    def samples() -> dict[tuple[str, str], float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        return {
            (s.labels.get("task", ""), s.labels.get("outcome", "")): s.value
            for family in parser.text_string_to_metric_families(text.decode())
            if family.name == "pgbaton_jobs"
            for s in family.samples if s.name == "pgbaton_jobs_total"
        }

    # The rows change before the events that count them reach the metrics (the events'
    # dispatcher hands them over in batches): wait for both counts, then check they stay.
    wanted = {("work", "succeeded"): 2, ("always_fails", "failed"): 1}
    wait_until(lambda: {k: samples().get(k) for k in wanted} == wanted, 10, "the counters")
    assert {k: samples().get(k) for k in wanted} == wanted
    assert worker.stop() == 0
