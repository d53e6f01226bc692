"""A running job's cancel reaches its worker at once (the jobs_status_changed trigger,
migration 28; jobs_notify_cancelled of migration 27 before it), not at the worker's next
heartbeat: with a lease of 60 s that beat is 20 s away, and each test here waits at most
CANCEL_SECONDS. A notification decides
nothing by itself: the worker checks its claims with its fenced heartbeat, so a forged
or garbled one stops nothing; and cancels sent while its LISTEN connection was down are
caught when it comes back (docs/explanation/architecture.md, "Cancels delivered")."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton import _sql
from pgbaton._sql import cancelled_channel
from pgbaton.worker import Worker, WorkerConfig
from pgbaton.worker.cancels import MAX_CANCELS_KEPT
from pgbaton.worker.heartbeat import EARLY_BEAT_GAP_SECONDS
from tests.helpers import listen_session_pid, wait_for

LEASE_SECONDS = 60.0  # the heartbeat beats every 20 s
CANCEL_SECONDS = 5.0  # far inside that: only the delivered cancel can be this quick
DEADLINE_SECONDS = 30.0


class Hanging:
    """A task whose handler runs until it is cancelled, or until let go."""

    def __init__(self, app: pgbaton.App) -> None:
        self.started = asyncio.Event()
        self.let_go = asyncio.Event()
        self.stopped_at: float | None = None

        @app.task(name="hang")
        async def hang() -> str:
            self.started.set()
            try:
                await asyncio.wait_for(self.let_go.wait(), DEADLINE_SECONDS)
            except asyncio.CancelledError:
                self.stopped_at = time.monotonic()
                raise
            return "let go"

        self.task = hang


def start(app: pgbaton.App, worker_id: str) -> tuple[Worker, asyncio.Task[int]]:
    worker = Worker(app, WorkerConfig(
        concurrency=2, lease=LEASE_SECONDS, maintenance=False, poll_interval=0.05,
        shutdown_grace=1.0, worker_id=worker_id))
    return worker, asyncio.create_task(worker.run())


async def listening(worker: Worker) -> None:
    """Until the worker LISTENs on both channels (wake("listen") comes after both)."""
    await wait_for(lambda: worker.stats["wakeups_listen"] >= 1, "the worker's LISTEN")


async def stop(worker: Worker, running: asyncio.Task[int]) -> int:
    worker.request_stop()
    return await asyncio.wait_for(running, DEADLINE_SECONDS)


def row(db: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    return db.execute("SELECT status, claim_token, lease_until FROM jobs WHERE id = %s",
                      (job_id,)).fetchone()  # type: ignore[return-value]


async def test_a_running_handler_is_stopped_by_its_cancel_within_seconds(queue, db, dsn, schema):
    app = pgbaton.App(dsn, schema=schema)
    hanging = Hanging(app)
    job_id = hanging.task.defer()
    worker, running = start(app, f"cancel-{uuid.uuid4().hex[:8]}")
    try:
        await asyncio.wait_for(hanging.started.wait(), DEADLINE_SECONDS)
        await listening(worker)
        cancelled_at = time.monotonic()
        assert queue.cancel(job_id)
        await wait_for(lambda: hanging.stopped_at is not None, "the handler to be cancelled",
                       CANCEL_SECONDS)
        # Let go of by its worker once its handler stopped: the key and the hold are free.
        await wait_for(lambda: row(db, job_id)["claim_token"] is None,
                       "the worker to let go of the cancelled claim", CANCEL_SECONDS)
        assert worker.stats["cancels_heard"] == 1
    finally:
        code = await stop(worker, running)
        app.queue.close()
    assert hanging.stopped_at is not None and hanging.stopped_at - cancelled_at < CANCEL_SECONDS
    assert row(db, job_id)["status"] == "cancelled"
    assert code == 0


async def test_a_forged_or_garbled_notification_stops_nothing(queue, db, dsn, schema):
    app = pgbaton.App(dsn, schema=schema)
    hanging = Hanging(app)
    job_id = hanging.task.defer()
    worker, running = start(app, f"forged-{uuid.uuid4().hex[:8]}")
    channel = cancelled_channel(schema)
    try:
        await asyncio.wait_for(hanging.started.wait(), DEADLINE_SECONDS)
        await listening(worker)
        before = row(db, job_id)["lease_until"]
        # Only the id as PostgreSQL prints it is one: not "0042", " 42" or "4_2", which
        # Python's int() would take.
        for payload in ("", "abc", "-1", "9" * 40, "1e3", "<script>", "'; DROP TABLE jobs; --",
                        f"0{job_id}", f" {job_id}", f"{job_id} ", "\u0661", str(job_id)):
            db.execute("SELECT pg_notify(%s, %s)", (channel, payload))
        # The one naming its job makes the worker beat now: the fenced beat finds the
        # claim still held and only extends its lease, 20 s early.
        await wait_for(lambda: row(db, job_id)["lease_until"] > before,
                       "the early, fenced heartbeat", CANCEL_SECONDS)
        # Heard in order: once the last payload is, only the one naming the job counted.
        await wait_for(lambda: worker.stats["cancels_heard"] >= 1, "the notifications heard")
        assert worker.stats["cancels_heard"] == 1
        assert hanging.stopped_at is None and not running.done()
        hanging.let_go.set()
        await wait_for(lambda: row(db, job_id)["status"] == "done", "the job to complete")
    finally:
        code = await stop(worker, running)
        app.queue.close()
    assert hanging.stopped_at is None
    assert code == 0


async def test_a_flood_of_notifications_makes_at_most_one_early_beat_a_gap(
    queue, db, dsn, schema
):
    """Anyone who can log in can NOTIFY: 400 notifications naming a held job, each in a
    transaction of its own (PostgreSQL folds identical ones within one), make the worker
    beat early at most once every EARLY_BEAT_GAP_SECONDS, not once each."""
    app = pgbaton.App(dsn, schema=schema)
    hanging = Hanging(app)
    job_id = hanging.task.defer()
    worker, running = start(app, f"flood-{uuid.uuid4().hex[:8]}")
    channel = cancelled_channel(schema)
    flood = 400
    try:
        await asyncio.wait_for(hanging.started.wait(), DEADLINE_SECONDS)
        await listening(worker)
        beats = worker.stats["heartbeats"]
        began = time.monotonic()

        def send() -> None:  # from a thread: the worker hears them as they come
            with psycopg.connect(dsn, autocommit=True) as flooder:
                for _ in range(flood):
                    flooder.execute("SELECT pg_notify(%s, %s)", (channel, str(job_id)))

        await asyncio.to_thread(send)
        await wait_for(lambda: worker.stats["cancels_heard"] == flood, "every notification")
        await wait_for(lambda: worker.stats["heartbeats"] > beats, "an early beat")
        took = time.monotonic() - began
        early = worker.stats["heartbeats"] - beats
        hanging.let_go.set()
        await wait_for(lambda: row(db, job_id)["status"] == "done", "the job to complete")
    finally:
        code = await stop(worker, running)
        app.queue.close()
    assert 1 <= early <= took / EARLY_BEAT_GAP_SECONDS + 2, (early, took)
    assert code == 0


async def test_a_cancel_sent_while_the_listener_was_down_is_caught_when_it_is_back(
    queue, db, dsn, schema
):
    app = pgbaton.App(dsn, schema=schema)
    hanging = Hanging(app)
    job_id = hanging.task.defer()
    worker_id = f"relisten-{uuid.uuid4().hex[:8]}"
    worker, running = start(app, worker_id)
    try:
        await asyncio.wait_for(hanging.started.wait(), DEADLINE_SECONDS)
        pid = await listen_session_pid(db, worker_id)
        # The cancel commits in the same transaction that ends the LISTEN session: its
        # NOTIFY goes out after the session is gone, to nobody of this worker's.
        with db.transaction():
            # Waits (up to 5 s) until the session is gone.
            db.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            db.execute("UPDATE jobs SET status = 'cancelled', finished_at = now()"
                       " WHERE id = %s AND status = 'running'", (job_id,))
        cancelled_at = time.monotonic()
        # The listener reconnects after a second and beats at once for what it holds.
        await wait_for(lambda: hanging.stopped_at is not None,
                       "the handler to be cancelled after the LISTEN came back",
                       CANCEL_SECONDS)
    finally:
        code = await stop(worker, running)
        app.queue.close()
    assert hanging.stopped_at is not None and hanging.stopped_at - cancelled_at < CANCEL_SECONDS
    assert worker.stats["cancels_heard"] == 0  # no notification reached it: the reconnect did
    assert code == 0


@pytest.mark.parametrize("flooded", [False, True], ids=["alone", "pushed-out-by-a-flood"])
async def test_a_cancel_heard_while_the_claim_is_on_its_way_is_not_lost(
    queue, db, dsn, schema, flooded
):
    """The cancel commits after the claim and before its answer reaches the worker: the
    worker hears of a job it does not hold yet, keeps the id a while, and beats once the
    claim brings the job. Flooded: more notifications of jobs it does not hold than it
    keeps (MAX_CANCELS_KEPT, anyone may NOTIFY) come after the cancel and push its id
    out; the claim that was on its way is then doubted whole, and the cancel still
    stops its job at once."""
    app = pgbaton.App(dsn, schema=schema)
    hanging = Hanging(app)
    worker, running = start(app, f"inflight-{uuid.uuid4().hex[:8]}")
    claim_batch = worker.queue.engine.claim_batch
    job_id = -1  # enqueued once the worker listens: a claim sent before would be doubted

    async def claim_then_cancel(*args: Any, **kwargs: Any) -> Any:
        batch = await claim_batch(*args, **kwargs)
        if any(c.id == job_id for c in batch.claims):
            worker.queue.engine.claim_batch = claim_batch  # once
            await asyncio.to_thread(queue.cancel, job_id)
            await wait_for(lambda: job_id in worker.cancels.unheld,
                           "the worker to hear the cancel of a job it does not hold yet")
            if flooded:
                await asyncio.to_thread(
                    db.execute, "SELECT pg_notify(%s, (%s + g)::text)"
                    " FROM generate_series(1, %s) AS g",
                    (cancelled_channel(schema), 10**12, MAX_CANCELS_KEPT + 10))
                await wait_for(lambda: job_id not in worker.cancels.unheld,
                               "the flood to push the cancel out")
        return batch

    worker.queue.engine.claim_batch = claim_then_cancel  # type: ignore[method-assign]
    try:
        await listening(worker)
        job_id = hanging.task.defer()
        await asyncio.wait_for(hanging.started.wait(), DEADLINE_SECONDS)
        cancelled_at = time.monotonic()
        await wait_for(lambda: hanging.stopped_at is not None, "the handler to be cancelled",
                       CANCEL_SECONDS)
    finally:
        code = await stop(worker, running)
        app.queue.close()
    assert hanging.stopped_at is not None and hanging.stopped_at - cancelled_at < CANCEL_SECONDS
    # Flooded, its id was pushed out: the claim's doubt found the job cancelled, unnamed.
    assert worker.stats["cancels_heard"] == (0 if flooded else 1)
    assert row(db, job_id)["status"] == "cancelled"
    assert code == 0


def test_only_a_cancel_under_a_holder_is_announced(queue, db, schema):
    """A cancel keeps the holder's token (job_cancel: the worker must hear); a handler's
    own Cancel clears it (job_end_many: its worker knows). Only the first sends a
    notification. Both are written here on the listening session, which hears its own
    NOTIFYs with its commit: nothing is waited for."""
    first, second = queue.enqueue("t"), queue.enqueue("t")
    assert len(queue.claim("w", limit=2, lease=60)) == 2
    heard: list[str] = []
    db.add_notify_handler(lambda n: heard.append(n.payload))
    db.execute(f'LISTEN "{cancelled_channel(schema)}"')  # type: ignore[arg-type]
    db.execute(_sql.queries(schema)["job_cancel"], {"id": first})  # type: ignore[arg-type]
    db.execute("UPDATE jobs SET status = 'cancelled', claim_token = NULL, lease_until = NULL,"
               " finished_at = now() WHERE id = %s AND status = 'running'", (second,))
    db.execute("SELECT 1")
    assert heard == [str(first)]
    assert [row(db, j)["status"] for j in (first, second)] == ["cancelled", "cancelled"]
