"""A job claimed ahead starts with no statement of its own (worker/starter.py): its start
is recorded by its outcome, or by an early beat once it has run a second; a cancel
reaches it by notification, and it waits for a fenced beat before it may start; while
the worker's LISTEN session is down, its start is written first, as before
(docs/explanation/architecture.md, "Claiming ahead").

One worker in this process, concurrency 1 and three claimed ahead: its first claim
starts one job and holds the rest. Each handler notes when it began by the wall clock,
which the server's now() shares on this machine."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgbaton
from pgbaton._sql import echo_channel
from pgbaton.limits import MAX_SCHEMA_NAME_LENGTH
from pgbaton.worker import Worker, WorkerConfig
from pgbaton.worker import echo as echo_module
from tests.helpers import listen_session_pid, wait_for
from tests.proxy import PausableProxy

LEASE_SECONDS = 60.0  # the heartbeat beats every 20 s: only the early beats are quick
DEADLINE_SECONDS = 30.0
# The start recorded is the handler's, to within the statement's trip to the server.
CLOCK_SLACK_SECONDS = 0.05
# A start past heartbeat.START_RECORD_SECONDS (1 s) is recorded at the next progress
# flush (every second): within 2 s, 5 on a loaded machine; the heartbeat's is 20 s.
RECORDED_WITHIN_SECONDS = 5.0
# echo.ECHO_STALE_SECONDS (3 s) past the last echo heard, and a second's pace: 10 s is
# far inside the hours TCP takes to say a silent connection is gone.
SILENCE_FOUND_SECONDS = 10.0


class Tasks:
    """`first` and `gate`: run until let go (let_first_go, let_go); `note`: runs
    `seconds`. Each notes when it began."""

    def __init__(self, app: pgbaton.App) -> None:
        self.began: dict[int, float] = {}
        self.let_go = asyncio.Event()
        self.let_first_go = asyncio.Event()

        @app.task(name="first", pass_context=True)
        async def first(context: pgbaton.JobContext) -> None:
            self.began[context.job_id] = time.time()
            await asyncio.wait_for(self.let_first_go.wait(), DEADLINE_SECONDS)

        @app.task(name="gate", pass_context=True)
        async def gate(context: pgbaton.JobContext) -> None:
            self.began[context.job_id] = time.time()
            await asyncio.wait_for(self.let_go.wait(), DEADLINE_SECONDS)

        @app.task(name="note", pass_context=True)
        async def note(context: pgbaton.JobContext, seconds: float = 0.0) -> None:
            self.began[context.job_id] = time.time()
            await asyncio.sleep(seconds)

        @app.task(name="snoozer", pass_context=True, max_snoozes=0)
        async def snoozer(context: pgbaton.JobContext) -> None:
            self.began[context.job_id] = time.time()
            await asyncio.sleep(0.2)
            raise pgbaton.Snooze(60)

        self.first, self.gate, self.note, self.snoozer = first, gate, note, snoozer


def start(
    app: pgbaton.App, name: str, *, listen_dsn: str | None = None
) -> tuple[Worker, asyncio.Task[int]]:
    worker = Worker(app, WorkerConfig(
        concurrency=1, claim_ahead=3, lease=LEASE_SECONDS, maintenance=False,
        poll_interval=0.05, shutdown_grace=1.0,
        worker_id=f"{name}-{uuid.uuid4().hex[:8]}", listen_dsn=listen_dsn))
    return worker, asyncio.create_task(worker.run())


def silenceable(dsn: str) -> tuple[PausableProxy, str]:
    """A proxy to the server, and a DSN through it for a LISTEN session to go silent
    on (pause: no error, no close, as a dropped route looks)."""
    info = conninfo_to_dict(dsn)
    proxy = PausableProxy(str(info.get("host") or "/tmp"), int(info.get("port") or 5432))
    return proxy, make_conninfo(dsn, host="127.0.0.1", port=str(proxy.port))


async def stop(worker: Worker, running: asyncio.Task[int]) -> int:
    worker.request_stop()
    return await asyncio.wait_for(running, DEADLINE_SECONDS)


def done(db: psycopg.Connection[Any]) -> int:
    return db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'done'"
                      ).fetchone()["n"]  # type: ignore[index]


def jobs(db: psycopg.Connection[Any], ids: list[int]) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in db.execute(
        "SELECT id, status, attempts, holds, claim_token, extract(epoch FROM started_at)"
        " AS started, extract(epoch FROM finished_at) AS finished FROM jobs"
        " WHERE id = ANY(%s)", (ids,))}


async def held(worker: Worker, count: int) -> None:
    await wait_for(lambda: len(worker.held) == count, f"{count} jobs held")


async def one_running_one_behind(worker: Worker, tasks: Tasks) -> tuple[int, int]:
    """A `gate` job running in the worker's one slot, a `note` job waiting ahead behind
    it, and the worker hearing cancels: the two jobs' ids."""
    first = tasks.gate.defer()
    behind = tasks.note.defer()
    await wait_for(lambda: first in tasks.began, "the first job started")
    await held(worker, 2)
    await hearing(worker)
    return first, behind


async def let_go(db: psycopg.Connection[Any], job: int) -> None:
    await wait_for(lambda: jobs(db, [job])[job]["claim_token"] is None,
                   "the cancelled job let go")


def never_ran(db: psycopg.Connection[Any], tasks: Tasks, job: int) -> None:
    """The cancelled job's handler never began; the job is cancelled, with no start
    recorded and its claim's hold given back."""
    assert job not in tasks.began
    row = jobs(db, [job])[job]
    assert (row["status"], row["started"], row["holds"]) == ("cancelled", None, 0)


async def hearing(worker: Worker) -> None:
    """Until the worker hears cancels (its LISTEN session up and, while jobs wait ahead
    in it, its echo back within a second): only then do its jobs claimed ahead start
    with no statement."""
    await wait_for(lambda: worker.held.hearing_cancels, "the worker hearing cancels")


async def test_the_outcome_records_the_start_of_a_job_claimed_ahead(queue, db, dsn, schema):
    """Three jobs of 0.2 s wait behind the first, which ends once the worker hears
    cancels: no statement starts them, yet each ends with started_at at its handler's
    start (not its claim's, not its end), its attempt counted once and its claim's hold
    taken back."""
    app = pgbaton.App(dsn, schema=schema)
    tasks = Tasks(app)
    worker, running = start(app, "outcome")
    try:
        ids = [tasks.first.defer()] + [tasks.note.defer(seconds=0.2) for _ in range(3)]
        await held(worker, 4)
        await hearing(worker)
        tasks.let_first_go.set()
        await wait_for(lambda: done(db) == 4, "the four jobs done")
    finally:
        code = await stop(worker, running)
        app.queue.close()
    assert code == 0
    assert worker.stats["started_ahead"] == 3
    assert worker.stats["starts_written"] == 0  # no statement started them
    rows = jobs(db, ids)
    for job in ids:
        assert (rows[job]["attempts"], rows[job]["holds"]) == (1, 0), rows[job]
        assert abs(float(rows[job]["started"]) - tasks.began[job]) < CLOCK_SLACK_SECONDS
        assert float(rows[job]["finished"]) - float(rows[job]["started"]) >= 0.19
    # Each waited for the one before it: its start is its own, not the claim's.
    starts = sorted(float(r["started"]) for r in rows.values())
    assert all(b - a >= 0.19 for a, b in itertools.pairwise(starts)), starts


async def test_a_snooze_past_its_limit_records_the_start_of_a_job_claimed_ahead(
    queue, db, dsn, schema
):
    """A job started from the jobs ahead snoozes once past its task's max_snoozes (0):
    the write that ends it as failed records its handler's start, as any outcome does,
    and takes its claim's hold back."""
    app = pgbaton.App(dsn, schema=schema)
    tasks = Tasks(app)
    worker, running = start(app, "snooze")
    try:
        tasks.first.defer()
        snoozer = tasks.snoozer.defer()
        await held(worker, 2)
        await hearing(worker)
        tasks.let_first_go.set()
        await wait_for(lambda: jobs(db, [snoozer])[snoozer]["status"] == "failed",
                       "the snoozer failed past its limit")
    finally:
        code = await stop(worker, running)
        app.queue.close()
    assert code == 0
    assert worker.stats["starts_written"] == 0  # its start is the failure's to record
    row = jobs(db, [snoozer])[snoozer]
    assert row["started"] is not None
    assert abs(float(row["started"]) - tasks.began[snoozer]) < CLOCK_SLACK_SECONDS
    assert float(row["finished"]) - float(row["started"]) >= 0.19
    assert (row["attempts"], row["holds"]) == (0, 0), row


async def test_a_long_job_claimed_ahead_has_its_start_recorded_by_an_early_beat(
    queue, db, dsn, schema
):
    """A job started from the jobs ahead that runs on has its start recorded within
    about two seconds (heartbeat.START_RECORD_SECONDS and the flush's pace), long
    before the heartbeat would come."""
    app = pgbaton.App(dsn, schema=schema)
    tasks = Tasks(app)
    worker, running = start(app, "beat")
    try:
        first = tasks.first.defer()
        long = tasks.gate.defer()
        await held(worker, 2)
        await hearing(worker)
        tasks.let_first_go.set()
        await wait_for(lambda: long in tasks.began, "the long job started")
        assert jobs(db, [long])[long]["started"] is None  # not at its claim
        await wait_for(lambda: jobs(db, [long])[long]["started"] is not None,
                       "its start recorded", RECORDED_WITHIN_SECONDS)
        row = jobs(db, [long])[long]
        assert abs(float(row["started"]) - tasks.began[long]) < CLOCK_SLACK_SECONDS
        assert (row["status"], row["holds"]) == ("running", 0)
        tasks.let_go.set()
        await wait_for(lambda: done(db) == 2, "both done")
    finally:
        code = await stop(worker, running)
        app.queue.close()
    assert code == 0
    assert jobs(db, [first])[first]["holds"] == 0


async def test_a_job_cancelled_while_it_waits_starts_only_after_a_fenced_beat(
    queue, db, dsn, schema
):
    """The heartbeat is slowed to answer after a second. The job waiting ahead is
    cancelled, the worker hears it, and then its slot frees: the job is doubted, waits
    for the beat instead of starting, and the beat stops it. It never runs."""
    app = pgbaton.App(dsn, schema=schema)
    tasks = Tasks(app)
    worker, running = start(app, "doubt")
    heartbeat = worker.queue.engine.heartbeat

    async def slow_heartbeat(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(1.0)
        return await heartbeat(*args, **kwargs)

    try:
        _, behind = await one_running_one_behind(worker, tasks)
        worker.queue.engine.heartbeat = slow_heartbeat  # type: ignore[method-assign]
        assert queue.cancel(behind) is True
        await wait_for(lambda: worker.stats["cancels_heard"] == 1, "the cancel heard")
        tasks.let_go.set()  # the slot frees while the beat is on its way
        await wait_for(lambda: worker.stats["claims_lost"] == 1, "the job stopped")
        await let_go(db, behind)
    finally:
        code = await stop(worker, running)
        app.queue.close()
    assert code == 0
    never_ran(db, tasks, behind)


async def test_while_the_listen_session_is_down_a_start_is_written_first(
    queue, db, dsn, schema
):
    """The cancel of a job waiting ahead commits with the end of the worker's LISTEN
    session, so its notification goes to nobody; the slot frees before the session is
    back. The worker, deaf meanwhile, writes the job's start first (job_start_many),
    which the cancel refuses: the job never runs."""
    app = pgbaton.App(dsn, schema=schema)
    tasks = Tasks(app)
    worker, running = start(app, "deaf")
    try:
        _, behind = await one_running_one_behind(worker, tasks)
        pid = await listen_session_pid(db, worker.worker_id)
        with db.transaction():
            db.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            db.execute("UPDATE jobs SET status = 'cancelled', finished_at = now()"
                       " WHERE id = %s AND status = 'running'", (behind,))
        await wait_for(lambda: not worker.held.hearing_cancels, "the worker to know it is deaf")
        tasks.let_go.set()
        await let_go(db, behind)
    finally:
        code = await stop(worker, running)
        app.queue.close()
    assert code == 0
    assert worker.stats["cancels_heard"] == 0
    never_ran(db, tasks, behind)
    row = jobs(db, [behind])[behind]
    assert (row["status"], row["started"], row["holds"]) == ("cancelled", None, 0)


async def test_a_listen_session_gone_silent_is_found_out_by_its_echo(queue, db, dsn, schema):
    """The worker's LISTEN session runs through a proxy that then goes silent: no error,
    no close, as a dropped route looks. The worker's echoes stop coming back, so within
    a few seconds it no longer counts on hearing cancels (worker/echo.py); a job waiting
    ahead whose cancel was lost in the silence is then refused by the start statement
    when its slot frees, and never runs."""
    proxy, through = silenceable(dsn)
    app = pgbaton.App(dsn, schema=schema)
    tasks = Tasks(app)
    worker, running = start(app, "silent", listen_dsn=through)
    try:
        _, behind = await one_running_one_behind(worker, tasks)
        proxy.pause()
        assert queue.cancel(behind) is True
        await wait_for(lambda: not worker.held.hearing_cancels,
                       "the worker to find its LISTEN session silent", SILENCE_FOUND_SECONDS)
        tasks.let_go.set()
        await let_go(db, behind)
        code = await stop(worker, running)
    finally:
        proxy.close()
        app.queue.close()
    assert code == 0
    assert worker.stats["cancels_heard"] == 0
    never_ran(db, tasks, behind)


async def test_a_worker_echoes_on_a_channel_only_its_own_session_hears(
    queue, db, dsn, schema
):
    """A worker's echo goes to a channel of its own (worker/echo.py): a session that
    listens on the cancels' channel, as every other worker does, hears none of them,
    though the worker hears each. On the shared channel, each of W workers would hear
    every other's echoes, W² deliveries twice a second while jobs wait ahead."""
    app = pgbaton.App(dsn, schema=schema)
    tasks = Tasks(app)
    worker, running = start(app, "echo")
    other = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        await other.execute(f'LISTEN "{schema}_cancelled"')
        await one_running_one_behind(worker, tasks)
        # Two echoes sent after the other session listened, and heard by the worker:
        # on a shared channel both would have reached the other session too.
        since = worker.held.now()
        await wait_for(lambda: worker.held.echo_heard > since + 0.3,
                       "two echoes heard back after the other session listened")
        heard = [n.payload async for n in other.notifies(timeout=0.2)]
        tasks.let_go.set()
    finally:
        await other.close()
        code = await stop(worker, running)
        app.queue.close()
    assert code == 0
    assert heard == [], heard


def test_an_echo_channel_of_the_longest_schema_name_is_heard_whole(dsn):
    """With a schema name at its limit, the echo channel still fits PostgreSQL's 63
    bytes: pg_notify refuses a longer name, and LISTEN would cut it short and hear
    nothing."""
    channel = echo_channel("s" * MAX_SCHEMA_NAME_LENGTH, "0a1b2c")
    assert len(channel.encode()) == 63
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        conn.execute("SELECT pg_notify(%s, 'echo:w:1')", (channel,))
        heard = [(n.channel, n.payload) for n in conn.notifies(timeout=2.0, stop_after=1)]
    assert heard == [(channel, "echo:w:1")]
    for token in ("", "0a1b2", "0A1B2C", "0a1b2g", "0a1b2c3"):
        with pytest.raises(ValueError, match="6 hex digits"):
            echo_channel("pgbaton", token)


async def test_a_listen_session_gone_silent_is_cut_off_and_opened_anew(
    queue, db, dsn, schema, monkeypatch
):
    """The LISTEN session's proxy goes silent (no error, no close). Once no echo has
    come back for ECHO_SILENT_SECONDS (1 s here), the worker cuts the session off
    instead of waiting for TCP, and opens a new one when the route is back; a cancel
    then reaches its waiting job by notification again."""
    monkeypatch.setattr(echo_module, "ECHO_SILENT_SECONDS", 1.0)
    proxy, through = silenceable(dsn)
    app = pgbaton.App(dsn, schema=schema)
    tasks = Tasks(app)
    worker, running = start(app, "recut", listen_dsn=through)
    worker_id = worker.worker_id
    try:
        _, behind = await one_running_one_behind(worker, tasks)
        silent = await listen_session_pid(db, worker_id)
        proxy.pause()
        await wait_for(lambda: worker.stats["listen_sessions_cut"] >= 1,
                       "the silent session cut off", SILENCE_FOUND_SECONDS)
        proxy.resume()
        await wait_for(lambda: listen_pids(db, worker_id) - {silent}, "a new LISTEN session")
        await hearing(worker)
        assert queue.cancel(behind) is True
        await wait_for(lambda: worker.stats["cancels_heard"] == 1,
                       "the cancel heard on the new session")
        tasks.let_go.set()
        await let_go(db, behind)
        code = await stop(worker, running)
    finally:
        proxy.close()
        app.queue.close()
    assert code == 0
    never_ran(db, tasks, behind)


def listen_pids(db: psycopg.Connection[Any], worker_id: str) -> set[int]:
    return {r["pid"] for r in db.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        " AND query LIKE '%%LISTEN %%' AND query NOT LIKE '%%pg_notify%%'",
        (f"pgbaton worker {worker_id}",))}
