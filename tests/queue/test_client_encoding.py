"""Client encodings other than UTF8 (LATIN1 has no euro sign; under SQL_ASCII psycopg
reads text as bytes).

A caller's connection (conn=) in such an encoding: every single-job enqueue (enqueue,
with after=, an idempotency key or unique=, enqueue_once, a task's enqueue) refuses text
it cannot carry with one InvalidArgument naming the field and the encoding, as
enqueue_many does (tests/queue/test_enqueue_copy.py); psycopg raises before the
statement is sent, so nothing is written and the caller's transaction stays usable.
Each raised a bare UnicodeEncodeError.

A DSN that sets such an encoding (options=-c client_encoding=LATIN1): pgbaton's own
connections ask for UTF8 all the same, so the queue writes such text as given, and a
claim reads its task, queue and args back as str (under SQL_ASCII a claim's task was
b't', and a worker failed every job with UnknownTask; under LATIN1 a claim of args
beyond ASCII raised UnicodeDecodeError after it committed). A worker running such jobs
is tests/worker/test_client_encoding.py's."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgbaton
from pgbaton import Unique
from tests.helpers import UNENCODABLE_FIELDS, in_client_encoding

FIELDS = UNENCODABLE_FIELDS

# Each single-job enqueue, as (call, options): enqueue_once takes an idempotency key
# or unique=; after= and unique= refuse one.
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "enqueue": ("enqueue", {}),
    "enqueue-after": ("enqueue", {"after": "parent"}),
    "enqueue-unique": ("enqueue", {"unique": Unique()}),
    "enqueue_once": ("enqueue_once", {"idempotency_key": "once"}),
    "enqueue_once-unique": ("enqueue_once", {"unique": Unique()}),
}
CASES = [(call, field) for call, (_, options) in CALLS.items() for field in FIELDS
         if field != "idempotency_key" or not {"after", "unique"} & set(options)]
# AsyncQueue's calls on fewer fields: the naming is one function (_checks.unencodable),
# tried on every field above; here a column's text, the args and the idempotency key.
ASYNC_CASES = [(call, field) for call, field in CASES
               if field in ("task", "args", "idempotency_key")]


def _job(call: str, field: str, parent: int) -> tuple[str, dict[str, Any]]:
    """The method to call and its keywords: task "t", args with text LATIN1 carries,
    then the call's options and the field at fault."""
    method, options = CALLS[call]
    job: dict[str, Any] = {"task": "t", "args": {"price": "5 ¢"}, **options,
                           **FIELDS[field][0]}
    if job.get("after") == "parent":
        job["after"] = [parent]
    return method, job


def _given(call: str, field: str, parent: int) -> dict[str, Any]:
    """The columns the job of _job(call, field, parent) is stored with, as given."""
    _, job = _job(call, field, parent)
    return {"queue": "default", "task": job["task"], "args": job["args"],
            **{name: job[name] for name in STORED if name in job}}


STORED = ["queue", "task", "args", "key", "limit_key", "idempotency_key"]


def _stored_beside(db: psycopg.Connection[Any], known: list[int]) -> list[dict[str, Any]]:
    """The jobs other than `known`, as stored (read back in UTF8): the given columns of
    _given, each job's subset of STORED."""
    rows = db.execute(f"SELECT {', '.join(STORED)} FROM jobs"  # type: ignore[arg-type]
                      " WHERE NOT id = ANY(%s) ORDER BY id", (known,)).fetchall()
    return [dict(row) for row in rows]


def _refused(field: str) -> str:
    return (f"^{FIELDS[field][1]} cannot be sent: the connection's client encoding "
            "latin-1 has no '€' \\(U\\+20AC\\); nothing was written")


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_one_job_a_callers_connection_cannot_carry_is_named_and_nothing_is_written(
    queue, dsn, case
):
    """LATIN1 on the caller's connection and a euro sign in any of the job's text
    fields: InvalidArgument naming the field; the job enqueued before it in the caller's
    transaction stays, and the transaction commits."""
    call, field = case
    parent = queue.enqueue("parent")
    latin1_dsn = in_client_encoding(dsn, "LATIN1")
    with (pgbaton.Queue(latin1_dsn, schema=queue.schema) as theirs,
          psycopg.connect(latin1_dsn) as conn):
        assert conn.info.parameter_status("client_encoding") == "LATIN1"
        kept = theirs.enqueue("kept", {"text": "café"}, conn=conn)
        method, job = _job(call, field, parent)
        with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
            getattr(theirs, method)(job.pop("task"), job.pop("args"), **job, conn=conn)
        conn.commit()  # the caller's transaction is still usable
    assert sorted(job.id for job in queue.jobs()) == [parent, kept]


def _fill(given: dict[str, Any]) -> dict[str, Any]:
    return {name: given.get(name) for name in STORED}


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_one_job_on_the_queues_own_connections_is_written_whatever_the_dsns_encoding(
    queue, dsn, db, case
):
    """LATIN1 in the queue's DSN and a euro sign in any of the job's text fields: the
    queue's own connections talk UTF8 whatever the DSN says, and the job is stored as
    given."""
    call, field = case
    parent = queue.enqueue("parent")
    with pgbaton.Queue(in_client_encoding(dsn, "LATIN1"), schema=queue.schema) as theirs:
        method, job = _job(call, field, parent)
        getattr(theirs, method)(job.pop("task"), job.pop("args"), **job)
    assert _stored_beside(db, [parent]) == [_fill(_given(call, field, parent))]


@pytest.mark.parametrize("case", ASYNC_CASES, ids="-".join)
async def test_one_async_job_a_callers_connection_cannot_carry_writes_nothing(
    aqueue, dsn, case
):
    """AsyncQueue's single-job enqueues refuse such a job on a caller's connection as
    Queue's do."""
    call, field = case
    parent = await aqueue.enqueue("parent")
    latin1_dsn = in_client_encoding(dsn, "LATIN1")
    async with (pgbaton.AsyncQueue(latin1_dsn, schema=aqueue.schema) as theirs,
                await psycopg.AsyncConnection.connect(latin1_dsn) as conn):
        kept = await theirs.enqueue("kept", {"text": "café"}, conn=conn)
        method, job = _job(call, field, parent)
        with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
            await getattr(theirs, method)(job.pop("task"), job.pop("args"), **job,
                                          conn=conn)
        await conn.commit()
    assert sorted(job.id for job in await aqueue.jobs()) == [parent, kept]


@pytest.mark.parametrize("case", ASYNC_CASES, ids="-".join)
async def test_one_async_job_on_the_queues_own_connections_is_written(aqueue, dsn, db, case):
    """AsyncQueue's own connections write such a job as Queue's do."""
    call, field = case
    parent = await aqueue.enqueue("parent")
    async with pgbaton.AsyncQueue(in_client_encoding(dsn, "LATIN1"),
                                  schema=aqueue.schema) as theirs:
        method, job = _job(call, field, parent)
        await getattr(theirs, method)(job.pop("task"), job.pop("args"), **job)
    assert _stored_beside(db, [parent]) == [_fill(_given(call, field, parent))]


def _app_task(dsn: str, schema: str, field: str) -> tuple[pgbaton.App, Any, dict[str, Any]]:
    """An App on `dsn` with one task (named "5 €" when the task is the field at
    fault), and the args and options of an enqueue with the field at fault."""
    app = pgbaton.App(dsn, schema=schema)

    def price(price: str) -> None: ...

    task = app.task(price, name="5 €" if field == "task" else "t")
    fields = {name: value for name, value in FIELDS[field][0].items() if name != "task"}
    return app, task, {"args": {"price": "5 ¢"}, **fields}


def _task_jobs(field: str) -> list[dict[str, Any]]:
    """The two jobs a task's enqueue and enqueue_once store, with the field at fault."""
    _, job = _job("enqueue", field, 0)
    given = {"queue": "default", **job}
    return [_fill(given), _fill({**given, "idempotency_key": "once"})]


@pytest.mark.parametrize("via", ["pool", "conn"])
@pytest.mark.parametrize("field", ["task", "queue", "args"])
def test_a_tasks_enqueue_names_what_a_callers_connection_cannot_carry(
    queue, dsn, db, via, field
):
    """Task.enqueue and Task.enqueue_once (Queue's, through the App's queue), on a DSN
    in LATIN1: a caller's connection in LATIN1 refuses the euro sign; the queue's own
    connections store it."""
    latin1_dsn = in_client_encoding(dsn, "LATIN1")
    app, task, job = _app_task(latin1_dsn, queue.schema, field)
    with psycopg.connect(latin1_dsn) as conn:
        kept = queue.enqueue("kept", conn=conn)
        args = job.pop("args")
        if via == "conn":
            with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
                task.enqueue(args, **job, conn=conn)
            with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
                task.enqueue_once(args, idempotency_key="once", **job, conn=conn)
        else:
            task.enqueue(args, **job)
            task.enqueue_once(args, idempotency_key="once", **job)
        conn.commit()
    app.queue.close()
    assert _stored_beside(db, [kept]) == ([] if via == "conn" else _task_jobs(field))


@pytest.mark.parametrize("via", ["pool", "conn"])
@pytest.mark.parametrize("field", ["task", "queue", "args"])
async def test_a_tasks_async_enqueue_names_what_a_callers_connection_cannot_carry(
    aqueue, dsn, db, via, field
):
    """Task.enqueue_async and Task.enqueue_once_async (AsyncQueue's)."""
    latin1_dsn = in_client_encoding(dsn, "LATIN1")
    app, task, job = _app_task(latin1_dsn, aqueue.schema, field)
    async with await psycopg.AsyncConnection.connect(latin1_dsn) as conn:
        kept = await aqueue.enqueue("kept", conn=conn)
        args = job.pop("args")
        if via == "conn":
            with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
                await task.enqueue_async(args, **job, conn=conn)
            with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
                await task.enqueue_once_async(args, idempotency_key="once", **job,
                                              conn=conn)
        else:
            await task.enqueue_async(args, **job)
            await task.enqueue_once_async(args, idempotency_key="once", **job)
        await conn.commit()
    await app.async_queue.close()
    assert _stored_beside(db, [kept]) == ([] if via == "conn" else _task_jobs(field))


# -- what a claim reads back on a DSN in these encodings ---------------------------------


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
def test_a_claim_on_a_dsn_in_another_client_encoding_reads_its_text_as_given(
    queue, dsn, encoding
):
    """A queue whose DSN sets client_encoding=SQL_ASCII or LATIN1 claims a job whose
    task, queue and args go beyond ASCII (and beyond LATIN1): all three come back as
    given, names as str."""
    with pgbaton.Queue(in_client_encoding(dsn, encoding), schema=queue.schema) as theirs:
        job_id = theirs.enqueue("café €", {"text": "café €"}, queue="file €")
        claims = theirs.claim("w", queues=["file €"])
    assert [(claim.id, claim.task, claim.queue, claim.args) for claim in claims] == [
        (job_id, "café €", "file €", {"text": "café €"})]


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
async def test_an_async_claim_on_a_dsn_in_another_client_encoding_reads_its_text(
    aqueue, dsn, encoding
):
    """AsyncQueue's claim, as Queue's."""
    async with pgbaton.AsyncQueue(in_client_encoding(dsn, encoding),
                                  schema=aqueue.schema) as theirs:
        job_id = await theirs.enqueue("café €", {"text": "café €"}, queue="file €")
        claims = await theirs.claim("w", queues=["file €"])
    assert [(claim.id, claim.task, claim.queue, claim.args) for claim in claims] == [
        (job_id, "café €", "file €", {"text": "café €"})]


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
def test_the_queues_own_connections_talk_utf8_whatever_the_dsn_sets(queue, dsn, encoding):
    """libpq's client_encoding keyword wins over the DSN's `options=-c client_encoding`:
    the pool's connections and queue.connect()'s (LISTEN's, the leader's) are in UTF8,
    and the DSN's other options still hold."""
    theirs_dsn = make_conninfo(dsn, options=f"-c client_encoding={encoding} "
                                            "-c statement_timeout=4321")
    with pgbaton.Queue(theirs_dsn, schema=queue.schema) as theirs:
        with theirs._connection() as pooled:
            assert pooled.info.parameter_status("client_encoding") == "UTF8"
            assert pooled.execute("SHOW statement_timeout").fetchone() == {
                "statement_timeout": "4321ms"}
        with theirs.connect() as own:
            assert own.info.parameter_status("client_encoding") == "UTF8"
