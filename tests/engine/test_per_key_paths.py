"""Per-key order on every claim path: job_claim_many (no queue has a setting),
job_claim_queues (the same, for a worker that names its queues) and job_claim_flow (the
queue is limited, so the plain claims leave it alone and the flow function claims it).
The three repeat the same four per-key probes (the key's running job, a cancelled job's
holder, an older pending job, an older job waiting for its parents); each case here
asserts the same outcome on every path, and proves which path claimed: a rate-limited
queue logs a start per flow claim, and the plain claims' statements are recorded as the
engine sends them.

The probe of an older job waiting for its parents is tested on both paths in
test_per_key_basics.py.
"""

from __future__ import annotations

import functools
import multiprocessing.synchronize
import re
import time
import traceback
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton import _sql
from tests.helpers import PROCESS_TIMEOUT_SECONDS, job_rows, run_at_once

PATHS = ["plain", "named", "flow"]
# The statement each path claims with; the flow claim is proven by its starts' log.
STATEMENTS = {"plain": "job_claim_many", "named": "job_claim_queues",
              "flow": "job_claim_flow"}


def take_path(queue: pgbaton.Queue, path: str) -> list[str]:
    """Send the default queue's claims down `path` (for "flow": limits far above what
    the tests claim, so they change nothing but which statement claims; for "named":
    the queue's claims name the default queue). Returns the list into which the
    queue's engine records the hot-path statements it sends."""
    if path == "flow":
        queue.set_concurrency("default", 10_000)
        queue.set_rate("default", (10_000, 3600))
    if path == "named":
        queue.claim = functools.partial(queue.claim, queues=["default"])  # type: ignore[method-assign]
    return record_statements(queue)


def record_statements(queue: pgbaton.Queue) -> list[str]:
    sent: list[str] = []
    fetch = queue.engine._db._fetch_tuples

    def recorded(name: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(name)
        return fetch(name, *args, **kwargs)

    queue.engine._db._fetch_tuples = recorded  # type: ignore[method-assign]
    return sent


def assert_claimed_by(db: psycopg.Connection[DictRow], path: str, sent: list[str]) -> None:
    """Every attempt was a flow claim (each logged one start), or none was; and every
    claim went by the path's statement."""
    row = db.execute(
        "SELECT (SELECT count(*) FROM queue_starts) AS starts,"
        " (SELECT coalesce(sum(attempts), 0) FROM jobs) AS attempts"
    ).fetchone()
    assert row is not None and row["attempts"] > 0
    assert row["starts"] == (row["attempts"] if path == "flow" else 0), row
    claims = [name for name in sent if name.startswith("job_claim")]
    assert claims and set(claims) == {STATEMENTS[path]}, claims


def claimed(queue: pgbaton.Queue, worker: str = "w") -> list[int]:
    return sorted(claim.id for claim in queue.claim(worker, limit=10, lease=60))


@pytest.mark.parametrize("path", PATHS)
def test_one_job_of_a_key_runs_and_the_next_in_order_follows_it(queue, db, path):
    """While a key's job runs, the key's later jobs wait; other keys and jobs without a
    key do not; once it is done, the next of its key (by id) is claimed, alone."""
    sent = take_path(queue, path)
    k1 = queue.enqueue_many([{"task": "t", "key": "k1"} for _ in range(3)])
    k2 = queue.enqueue("t", key="k2")
    free = queue.enqueue("t")
    first = queue.claim("w", limit=10, lease=60)
    assert sorted(c.id for c in first) == sorted([k1[0], k2, free])
    assert claimed(queue) == []
    for claim in first:
        assert queue.complete(claim)
    assert claimed(queue) == [k1[1]]
    assert claimed(queue) == []
    assert job_rows(db, "id", "status") == [
        (k1[0], "done"), (k1[1], "running"), (k1[2], "pending"), (k2, "done"),
        (free, "done"),
    ]
    assert_claimed_by(db, path, sent)


@pytest.mark.parametrize("path", PATHS)
def test_an_older_job_waiting_for_its_retry_holds_its_key(queue, db, path):
    """A keyed job that failed and waits for its retry keeps its place: the next job of
    its key is not claimed before it, while a job of another key is."""
    sent = take_path(queue, path)
    first, second = queue.enqueue_many([{"task": "t", "key": "k"}] * 2)
    [claim] = queue.claim("w", lease=60)
    assert claim.id == first
    assert queue.fail(claim, "try later", retry_in=3600)
    other = queue.enqueue("t", key="other")
    assert claimed(queue) == [other]
    assert job_rows(db, "id", "status", "run_at > now()") == [
        (first, "pending", True), (second, "pending", False), (other, "running", False),
    ]
    assert_claimed_by(db, path, sent)


@pytest.mark.parametrize("path", PATHS)
def test_a_cancelled_jobs_holder_holds_its_key_until_it_releases(queue, db, path):
    """The next job of a cancelled running job's key waits while the cancelled handler
    may still run, and is claimed once the holder lets go."""
    sent = take_path(queue, path)
    first, second = queue.enqueue_many([{"task": "t", "key": "k"}] * 2)
    [holder] = queue.claim("w1", lease=60)
    assert holder.id == first
    assert queue.cancel(first)
    assert claimed(queue) == []
    assert queue.release(holder) is False  # lost to the cancel; its handler has stopped
    assert claimed(queue) == [second]
    assert job_rows(db, "id", "status") == [(first, "cancelled"), (second, "running")]
    assert_claimed_by(db, path, sent)


KEYS = 6
JOBS_PER_KEY = 20
UNKEYED = 20
WORKERS = 4


def _worker(  # noqa: PLR0917 - run_at_once passes its arguments by position
    index: int, dsn: str, schema: str, path: str, start: multiprocessing.synchronize.Barrier,
    reports: multiprocessing.Queue[dict[str, Any]],
) -> None:
    """One spawned process: claim small batches and work them in claim order, each job
    an effect whose start and end are taken on the server's clock (clock_timestamp()),
    until no job is left unfinished. jobs.started_at is now(), the claim statement's
    start, which precedes its snapshot: it cannot date a claim against a completion."""
    try:
        done = 0
        with (
            pgbaton.Queue(dsn, schema=schema) as queue,
            psycopg.connect(dsn, autocommit=True) as db,
        ):
            queue.open()
            sent = record_statements(queue)
            queues = ["default"] if path == "named" else None
            db.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
            start.wait(timeout=PROCESS_TIMEOUT_SECONDS)
            deadline = time.monotonic() + PROCESS_TIMEOUT_SECONDS
            while time.monotonic() < deadline:
                claims = queue.claim(f"w{index}", limit=3, lease=60, queues=queues)
                for claim in claims:
                    db.execute("INSERT INTO effects (job_id, key) VALUES (%s, %s)",
                               (claim.id, claim.key))
                for claim in claims:
                    db.execute("UPDATE effects SET ended = clock_timestamp()"
                               " WHERE job_id = %s", (claim.id,))
                    assert queue.complete(claim)
                done += len(claims)
                if claims:
                    continue
                left = db.execute("SELECT count(*) FROM jobs WHERE status <> 'done'").fetchone()
                if left == (0,):
                    break
                time.sleep(0.002)  # the rest are another worker's, or wait for a key
        reports.put({"process": index, "done": done, "sent": sorted(set(sent))})
    except BaseException:
        start.abort()
        reports.put({"process": index, "error": traceback.format_exc()})


@pytest.mark.parametrize("path", PATHS)
def test_workers_in_several_processes_keep_each_keys_order(queue, db, dsn, schema, path):
    """Several processes claiming at once, on either path: every job runs once, and each
    key's jobs start in id order, each after the one before it ended, though each key's
    later jobs come first in priority."""
    sent = take_path(queue, path)
    db.execute("CREATE TABLE effects (job_id bigint NOT NULL, key text,"
               " began timestamptz NOT NULL DEFAULT clock_timestamp(), ended timestamptz)")
    queue.enqueue_many(
        # Each key's later jobs have the higher priorities, so the claim's scan meets
        # them before the key's oldest: only the per-key probes keep the order.
        [{"task": "t", "key": f"k{n % KEYS}", "priority": n // KEYS}
         for n in range(KEYS * JOBS_PER_KEY)]
        + [{"task": "t"} for _ in range(UNKEYED)]
    )
    ran = run_at_once(_worker, WORKERS, dsn, schema, path)
    assert not ran.errors, "\n".join(ran.errors)
    sent += [name for report in ran.reports for name in report["sent"]]
    total = KEYS * JOBS_PER_KEY + UNKEYED
    assert sum(r["done"] for r in ran.reports) == total
    assert db.execute(
        "SELECT count(*) AS n, bool_and(status = 'done' AND attempts = 1) AS once,"
        " count(DISTINCT worker_id) > 1 AS shared FROM jobs"
    ).fetchone() == {"n": total, "once": True, "shared": True}
    # Within a key, by id: a start before the previous job's end is an overlap, a start
    # before the previous job's start an order broken.
    broken = db.execute(
        "SELECT key, job_id, began, before_began, before_ended FROM ("
        "  SELECT key, job_id, began,"
        "         lag(began) OVER by_key AS before_began,"
        "         lag(ended) OVER by_key AS before_ended"
        "  FROM effects WHERE key IS NOT NULL"
        "  WINDOW by_key AS (PARTITION BY key ORDER BY job_id)) AS k"
        " WHERE began <= before_began OR began <= before_ended"
    ).fetchall()
    assert broken == []
    assert db.execute(
        "SELECT count(*) AS n, count(DISTINCT job_id) AS jobs, bool_and(ended IS NOT NULL)"
        " AS ended FROM effects"
    ).fetchone() == {"n": total, "jobs": total, "ended": True}
    assert_claimed_by(db, path, sent)


def _key_probes(text: str) -> list[str]:
    """Each `(c.key IS NULL OR (...))` block of a statement, comments and layout dropped,
    the flow function's `clock` read as the plain claim's now()."""
    text = re.sub(r"--[^\n]*", "", text)
    text = " ".join(text.split()).replace("( ", "(").replace(" )", ")")
    found = []
    for start in (m.start() for m in re.finditer(r"\(c\.key IS NULL OR \(", text)):
        depth = 0
        for end in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        found.append(re.sub(r"\bclock\b", "now()", text[start:end + 1]))
    return found


def test_the_flow_claim_runs_the_plain_claims_key_probes(queue, db, schema):
    """job_claim_flow, as migrated, repeats the plain claims' per-key probes word for
    word (job_claim_many's and job_claim_queues': the fragment claim_key_free), so that
    the two paths cannot drift apart: a probe changed in one and not the other fails
    here."""
    statements = _sql.queries(schema)
    plain = _key_probes(statements["job_claim_many"] + statements["job_claim_queues"])
    [flow_source] = [
        r["prosrc"] for r in db.execute(
            "SELECT prosrc FROM pg_proc WHERE proname = 'job_claim_flow'"
            " AND pronamespace = %s::regnamespace"
            " AND prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')",
            (schema,),
        )
    ]
    flow = _key_probes(flow_source)
    assert len(plain) == 2 and len(flow) == 1
    assert plain[0] == plain[1] == flow[0]
    assert flow[0].count("NOT EXISTS") == 4
