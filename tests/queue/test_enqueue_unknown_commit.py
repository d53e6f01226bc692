"""An enqueue whose connection dies mid-call (issue 27 item 2;
docs/explanation/reliability.md, "An enqueue whose commit is unknown"): a batch by COPY
on pgbaton's own connection finds out whether it was written, from the ids it reserved
first. Here the server ends its backend during the COPY: the call raises
ConnectionFailed with `written` False, nothing is in the table, and the retry writes the
batch once."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton.errors import ConnectionFailed

JOBS = 200_000  # enough rows that the COPY is still running when it is ended


def _end_the_copy(dsn: str, schema: str, ended: list[int]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE query LIKE %s"
                " AND pid <> pg_backend_pid()", (f'%COPY "{schema}".jobs%',)).fetchall()
            if rows:
                conn.execute("SELECT pg_terminate_backend(%s)", (rows[0][0],))
                ended.append(rows[0][0])
                return
            time.sleep(0.002)


def test_a_copy_batch_cut_off_mid_call_says_nothing_was_written(
    queue: pgbaton.Queue, db: psycopg.Connection[Any], dsn: str, schema: str
):
    jobs = [{"task": "noop", "args": {"n": n}} for n in range(JOBS)]
    ended: list[int] = []
    killer = threading.Thread(target=_end_the_copy, args=(dsn, schema, ended))
    killer.start()
    with pytest.raises(ConnectionFailed) as lost:
        queue.enqueue_many(jobs)
    killer.join()
    assert ended, "the COPY was never seen running"
    assert lost.value.written is False
    assert any("a retry is safe" in note for note in lost.value.__notes__)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}

    ids = queue.enqueue_many(jobs)
    assert len(ids) == JOBS
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": JOBS}


def test_a_call_waits_for_a_connection_as_long_as_the_queue_says(dsn: str, schema: str):
    """connect_timeout bounds each call's wait for a pooled connection: with the pool's
    one connection taken, a call gives up after it with ConnectionFailed."""
    with pgbaton.Queue(dsn, schema=schema, pool_size=1, connect_timeout=0.3) as queue:
        queue.migrate()
        with queue._connection(), pytest.raises(ConnectionFailed, match=r"after 0\.30 sec"):
            queue.enqueue("noop")


@pytest.mark.parametrize("value", [0, -1, float("nan"), True, "10"])
def test_a_bad_connect_timeout_is_refused(value: Any):
    with pytest.raises(pgbaton.errors.InvalidArgument, match="connect_timeout"):
        pgbaton.Queue("postgresql://nowhere/none", connect_timeout=value)
