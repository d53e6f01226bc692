"""enqueue_many's large batches go by COPY: the same rows, ids, wake-up, meta and events
as the INSERT statement, all or nothing, and inside the caller's transaction."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any, ClassVar

import psycopg
import pytest

import pgbaton
from pgbaton._copy_rows import COPY_CHUNK_ROWS, CopyRows
from pgbaton._queue import enqueueing
from pgbaton.limits import INT4_MAX, INT4_MIN, MAX_JSON_DEPTH
from tests.helpers import UNENCODABLE_FIELDS, in_client_encoding

# Values that would break a hand-written COPY line or an unquoted statement: the COPY
# delimiters and escapes, SQL, markup, NULs spelled out, and text beyond ASCII.
AWKWARD = [
    "tab\there", "new\nline", "carriage\rreturn", "back\\slash", "\\N", "\\.",
    "'); DROP TABLE jobs; --", "<script>alert(1)</script>", "&amp; \"quoted\"",
    "日本語 ✓ 🎉", "é\u0301", "\\u0000 as text", "",
]


def _jobs(now: dt.datetime) -> list[dict[str, Any]]:
    """Every enqueue option, at its limits and beside its default, many times over."""
    jobs: list[dict[str, Any]] = []
    for n in range(600):
        text = AWKWARD[n % len(AWKWARD)]
        job: dict[str, Any] = {"task": f"task {text}" if text else "task",
                               "args": {"n": n, "text": text, "none": None,
                                        "nested": [{"deep": [text, None, 1.5]}]}}
        if n % 7 == 0:
            job["queue"] = f"queue {text}"
        if n % 5 == 0:
            job["priority"] = (INT4_MIN, INT4_MAX, -1, 1)[n // 5 % 4]
        if n % 11 == 0:
            job["run_at"] = now + dt.timedelta(days=n, microseconds=n)
        elif n % 13 == 0:
            job["delay"] = 0.1234565 * n
        if n % 3 == 0:
            job["key"] = f"key {text} {n}"
        if n % 17 == 0:
            job["limit_key"] = f"limit {text}"
        if n % 19 == 0:
            job["max_attempts"] = (1, INT4_MAX)[n // 19 % 2]
        jobs.append(job)
    jobs[1]["args"]["big"] = "x" * 1_000_000  # a megabyte of args
    return jobs


def _counted_copies(q: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the batches `q` (a Queue or an AsyncQueue) writes by COPY."""
    sizes: list[int] = []
    write = q._copy_many

    def counted(rows: Any, meta: Any, conn: Any) -> Any:
        sizes.append(len(rows))
        return write(rows, meta, conn)  # the async one's coroutine, awaited by the caller

    monkeypatch.setattr(q, "_copy_many", counted)
    return sizes


@pytest.fixture
def copies(queue: pgbaton.Queue, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the batches the queue wrote by COPY."""
    return _counted_copies(queue, monkeypatch)


COLUMNS = [
    "queue", "task", "args", "status", "priority", "run_at", "attempts", "max_attempts",
    "key", "idempotency_key", "claim_token", "lease_until", "worker_id", "errors",
    "result", "created_at", "started_at", "finished_at", "limit_key", "has_dependents",
    "waiting_for", "batch_id", "meta",
]


def _rows(conn: psycopg.Connection, schema: str, ids: list[int]) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        f'SELECT id, {", ".join(COLUMNS)} FROM "{schema}".jobs'  # type: ignore[arg-type]
        " WHERE id = ANY(%s) ORDER BY id",
        (ids,),
    ).fetchall()
    assert [row[0] for row in rows] == ids  # ids in input order, each job's own
    return [row[1:] for row in rows]


def test_copy_writes_the_rows_the_insert_writes(queue, dsn, schema, copies):
    """One input through both paths in one transaction (so now() is the same): every
    column of every row is equal, awkward text, big args, NULLs and limits included."""
    with psycopg.connect(dsn) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        jobs = _jobs(now)
        queue.copy_min_jobs = len(jobs) + 1
        inserted = queue.enqueue_many(jobs, conn=conn)
        queue.copy_min_jobs = len(jobs)
        copied = queue.enqueue_many(jobs, conn=conn)
        assert copies == [len(jobs)]
        assert len(set(inserted + copied)) == 2 * len(jobs)
        assert _rows(conn, schema, inserted) == _rows(conn, schema, copied)
        (delayed,) = conn.execute(
            f'SELECT run_at - created_at FROM "{schema}".jobs'  # type: ignore[arg-type]
            " WHERE id = %s", (copied[13],)
        ).fetchone()  # type: ignore[misc]
        assert abs(delayed.total_seconds() - 13 * 0.1234565) < 1e-6


def test_a_large_batch_is_copied_due_jobs_wake_workers_once(queue, dsn, copies):
    """A COPY fires the insert trigger as an INSERT does: one NOTIFY per queue at commit,
    none for jobs due later; the jobs are claimable in input order."""
    listener = psycopg.connect(dsn, autocommit=True)
    listener.execute(f'LISTEN "{queue.channel}"')  # type: ignore[arg-type]
    later = queue.enqueue_many([{"task": "t", "queue": "later", "delay": 3600}] * 600)
    ids = queue.enqueue_many([{"task": "t", "queue": "now", "args": {"n": n}} for n in range(600)])
    assert copies == [600, 600]
    assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == ["now"]
    assert list(listener.notifies(timeout=0.2)) == []
    claims = queue.claim("w", limit=1000)
    assert [c.id for c in claims] == ids
    assert [c.args for c in claims] == [{"n": n} for n in range(600)]
    assert later == sorted(later) and len(set(later)) == 600
    listener.close()


@pytest.mark.parametrize("when", ["delay", "run_at", "both"])
def test_a_scheduled_batch_of_several_pieces_writes_every_row(queue, db, copies, when):
    """A batch larger than one piece of COPY text (COPY_CHUNK_ROWS) in which some job is
    due later: every job is written, each with its own args and due time (the pieces
    after the first once came out empty, and their jobs were lost with ids returned)."""
    count = 2 * COPY_CHUNK_ROWS + 7
    later = dt.datetime(2031, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    jobs: list[dict[str, Any]] = [{"task": "t", "args": {"n": n}} for n in range(count)]
    if when in ("delay", "both"):
        jobs[3]["delay"] = 60
        jobs[-1]["delay"] = 120
    if when in ("run_at", "both"):
        jobs[COPY_CHUNK_ROWS + 1]["run_at"] = later
        jobs[-2]["run_at"] = later
    ids = queue.enqueue_many(jobs)
    assert copies == [count]
    rows = db.execute("SELECT id, (args ->> 'n')::int AS n, run_at - created_at AS wait,"
                      " run_at FROM jobs WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()
    assert [(r["id"], r["n"]) for r in rows] == list(zip(ids, range(count), strict=True))
    waits = {r["n"]: r["wait"].total_seconds() for r in rows if r["wait"]}
    at = {r["n"] for r in rows if r["run_at"] == later}
    if when in ("delay", "both"):
        assert waits[3] == 60 and waits[count - 1] == 120
    if when in ("run_at", "both"):
        assert at == {COPY_CHUNK_ROWS + 1, count - 2}
    assert len(waits) == {"delay": 2, "run_at": 2, "both": 4}[when]


def test_copy_text_short_of_its_rows_fails_the_copy_and_writes_nothing(
    queue, db, copies, monkeypatch
):
    """The guard behind the pieces: should the COPY text ever hold fewer rows than the
    ids returned, the COPY is failed from inside and no job is written."""
    text = CopyRows.text

    def one_row_short(self: CopyRows, *args: Any) -> Iterator[str]:
        for piece in text(self, *args):
            yield piece.partition("\n")[2]  # the piece's first row left out

    monkeypatch.setattr(CopyRows, "text", one_row_short)
    with pytest.raises(RuntimeError, match=r"held 1198 rows for 1200 jobs"):
        queue.enqueue_many([{"task": "t", "args": {"n": n}} for n in range(1200)])
    assert copies == [1200]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_copied_batch_rolled_back_with_the_callers_transaction_leaves_nothing(
    queue, dsn, db, copies
):
    """With conn=, the COPY is part of the caller's transaction: its rollback undoes it."""
    with psycopg.connect(dsn) as conn:
        queue.enqueue_many([{"task": "t"}] * 700, conn=conn)
        assert queue.jobs(conn=conn, limit=1000) != []
        conn.rollback()
    assert copies == [700]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"text": "nul \x00 here"}, pgbaton.NotSerializable),
        ({"text": "lone \ud800 surrogate"}, pgbaton.NotSerializable),
        ({"number": float("nan")}, pgbaton.NotSerializable),
        ({"big": "x" * (16 * 1024 * 1024)}, pgbaton.InvalidArgument),
    ],
)
def test_a_job_that_cannot_be_stored_refuses_the_whole_copied_batch(queue, db, bad, error):
    """A bad job late in a large batch is named with its position, and no job is written."""
    jobs: list[dict[str, Any]] = [{"task": "t", "args": {"n": n}} for n in range(1000)]
    jobs[700] = {"task": "late", "args": bad}
    with pytest.raises(error, match=r"^job 700: args for task 'late'"):
        queue.enqueue_many(jobs)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def _looped() -> dict[str, Any]:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    return looped


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ({"task": "late", "args": {1: "x"}}, pgbaton.NotSerializable,
         "job 700: args for task 'late' must have string keys"),
        ({"task": "late", "args": {"deep": _nested(MAX_JSON_DEPTH)}}, pgbaton.NotSerializable,
         "job 700: args for task 'late' cannot be stored as JSON: it is nested too deeply"),
        ({"task": "late", "args": {"deep": _nested(5_000)}}, pgbaton.NotSerializable,
         "job 700: args for task 'late' cannot be stored as JSON: it is nested too deeply"),
        ({"task": "late", "args": _looped()}, pgbaton.NotSerializable,
         "job 700: args for task 'late' cannot be stored as JSON: Circular reference"),
        ({"task": "late", "args": {"when": dt.date(2026, 1, 1)}}, pgbaton.NotSerializable,
         "job 700: args for task 'late' cannot be stored as JSON: Object of type date"),
        ({"task": "late", "args": ["x"]}, pgbaton.InvalidArgument,
         "job 700: args for task 'late' must be a mapping of keyword arguments, got list"),
        ({"task": "", "args": {}}, pgbaton.InvalidArgument,
         "job 700: task must be a non-empty string, got ''"),
        ({"task": "nul\x00", "args": {}}, pgbaton.InvalidArgument,
         "job 700: task cannot contain a NUL character"),
        ({"task": 7, "args": {}}, pgbaton.InvalidArgument,
         "job 700: task must be a non-empty string, got 7"),
        ({"task": "x" * 300, "args": {}}, pgbaton.InvalidArgument, "job 700: task is 300 bytes"),
        ({"tsak": "t", "args": {}}, pgbaton.InvalidArgument,
         "job 700 must be a mapping with a 'task'"),
        ({"task": "t", "args": {}, "prio": 1}, pgbaton.InvalidArgument,
         r"job 700 has unknown fields \['prio'\]"),
        ("t", pgbaton.InvalidArgument, "job 700 must be a mapping with a 'task'"),
    ],
    ids=["int-key", "deep", "deeper", "circular", "date", "list-args", "empty-task",
         "nul-task", "int-task", "long-task", "no-task", "unknown-field", "not-a-mapping"],
)
def test_a_bad_job_among_plain_ones_is_named_and_nothing_is_written(
    queue, db, bad, error, message
):
    """Among a large batch of plain jobs (checked a batch at a time), one job that is
    not one, or that pgbaton cannot store, is named with its position and its fault in
    the words of the job-by-job checks, and no job is written."""
    jobs: list[Any] = [{"task": "t", "args": {"n": n}} for n in range(1000)]
    jobs[700] = bad
    with pytest.raises(error, match=f"^{message}"):
        queue.enqueue_many(jobs)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_plain_jobs_are_copied_as_the_insert_writes_them(
    queue, dsn, schema, copies, monkeypatch
):
    """A large batch of plain jobs, awkward text in their task names, args and keys,
    goes by COPY without the job-by-job checks, and every column of every row is what
    the INSERT writes; the args read back as given, in input order."""
    checked: list[int] = []
    job_by_job = enqueueing.many_job_params

    def counted(jobs: Any, **options: Any) -> Any:
        checked.append(len(jobs))
        return job_by_job(jobs, **options)

    monkeypatch.setattr(enqueueing, "many_job_params", counted)
    jobs = [{"task": f"task {AWKWARD[n % len(AWKWARD)]}",
             "args": {AWKWARD[n % len(AWKWARD)]: AWKWARD[(n + 1) % len(AWKWARD)], "n": n,
                      "list": AWKWARD, "nested": {"x": [1.5, None, True]}}}
            for n in range(1200)]
    with psycopg.connect(dsn) as conn:
        queue.copy_min_jobs = len(jobs) + 1
        inserted = queue.enqueue_many(jobs, conn=conn)
        assert checked == [len(jobs)]
        queue.copy_min_jobs = len(jobs)
        copied = queue.enqueue_many(jobs, conn=conn)
        assert copies == [len(jobs)] and checked == [len(jobs)]
        assert _rows(conn, schema, inserted) == _rows(conn, schema, copied)
        conn.commit()
    claimed = []
    while claims := queue.claim("w", limit=1000):
        claimed += [claim for claim in claims if claim.id in set(copied)]
    assert [claim.id for claim in claimed] == copied
    assert [(claim.task, claim.args) for claim in claimed] == [
        (job["task"], job["args"]) for job in jobs]


def test_ids_drawn_with_a_gap_come_back_lowest_first_each_its_jobs(queue, dsn, schema, copies):
    """The ids of a COPY batch are one run from the first in the usual case; when another
    session drew from the sequence in between (here: its cache of 100 taken between
    the caller's cached ids and the batch), they still come back each its own job's,
    lowest first, in input order."""
    with psycopg.connect(dsn, autocommit=True) as other, psycopg.connect(dsn) as conn:
        other.execute(f'ALTER SEQUENCE "{schema}".jobs_id_seq CACHE 100')  # type: ignore[arg-type]
        first = queue.enqueue("t", conn=conn)  # conn keeps the rest of its 100 ids
        other.execute(f"SELECT nextval('\"{schema}\".jobs_id_seq')")  # type: ignore[arg-type]
        jobs = [{"task": "t", "args": {"n": n}} for n in range(600)]
        ids = queue.enqueue_many(jobs, conn=conn)
        conn.commit()
    assert copies == [600]
    assert ids[:99] == list(range(first + 1, first + 100))  # the rest of conn's cache
    assert ids[99] >= first + 200  # past the other session's 100
    assert ids[99:] == list(range(ids[99], ids[99] + 501))
    stored = queue.jobs(limit=1000)
    assert {job.id: job.args for job in stored if job.id != first} == {
        job_id: job["args"] for job_id, job in zip(ids, jobs, strict=True)}


def test_a_copy_the_server_stops_half_way_leaves_nothing(queue, dsn, db, copies):
    """A row the server refuses in the middle of a COPY (here a test trigger on job 700)
    undoes the rows before it; in the caller's transaction only the COPY is undone, and
    a job enqueued there before it stays."""
    db.execute(
        "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'poisoned job'; END; $$;"
        " CREATE TRIGGER refuse_poison BEFORE INSERT ON jobs FOR EACH ROW"
        " WHEN (NEW.args ? 'poison') EXECUTE FUNCTION refuse_poison()"
    )
    jobs: list[dict[str, Any]] = [{"task": "t", "args": {"n": n}} for n in range(1000)]
    jobs[700] = {"task": "t", "args": {"poison": True}}
    with pytest.raises(psycopg.errors.RaiseException, match="poisoned job"):
        queue.enqueue_many(jobs)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    with psycopg.connect(dsn) as conn:
        kept = queue.enqueue("kept", conn=conn)
        with pytest.raises(psycopg.errors.RaiseException, match="poisoned job"):
            queue.enqueue_many(jobs, conn=conn)
        conn.commit()
    assert copies == [1000, 1000]
    assert [job.id for job in queue.jobs()] == [kept]


def test_copy_stores_the_hooks_headers_and_tells_the_ids(queue, db, copies):
    """The enqueue hook's headers land in each copied job's meta, and it is told the ids;
    subscribers hear one job.enqueued for the batch."""
    sent: list[list[int]] = []
    heard: list[pgbaton.Event] = []

    class Span:
        headers: ClassVar[dict[str, str]] = {"traceparent": "00-abc-def-01"}

        def sent(self, job_ids: list[int]) -> None:
            sent.append(list(job_ids))

    @contextlib.contextmanager
    def hook(queue_name: str | None, count: int) -> Iterator[Span]:
        assert (queue_name, count) == ("default", 600)
        yield Span()

    queue.events.enqueue_hook = hook
    queue.events.subscribe(heard.append)
    ids = queue.enqueue_many([{"task": "t"}] * 600)
    assert copies == [600]
    assert sent == [ids]
    assert queue.events.flush()
    assert [(e.name, e.job_id, e.count) for e in heard] == [("job.enqueued", ids[0], 600)]
    metas = db.execute("SELECT DISTINCT meta FROM jobs").fetchall()
    assert metas == [{"meta": {"traceparent": "00-abc-def-01"}}]


def test_a_large_batch_with_idempotency_keys_takes_the_insert(queue, copies):
    """COPY cannot skip a taken key, so such a batch is one INSERT: a key repeated in it
    gets the first job's id."""
    jobs = [{"task": "t", "idempotency_key": f"k{n % 300}"} for n in range(600)]
    ids = queue.enqueue_many(jobs)
    assert copies == []
    assert ids[:300] == ids[300:] and len(set(ids)) == 300


async def test_the_async_queue_copies_a_large_batch_into_the_callers_transaction(aqueue, dsn):
    """AsyncQueue's COPY (psycopg's AsyncCopy) writes in the caller's transaction, with
    scheduled jobs among due ones; nothing is claimable before the commit."""
    jobs = [{"task": "t", "args": {"n": n}, **({"delay": 60} if n % 2 else {})}
            for n in range(800)]
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        ids = await aqueue.enqueue_many(jobs, conn=conn)
        assert await aqueue.claim("w") == []
        await conn.commit()
    claims = await aqueue.claim("w", limit=1000)
    assert [c.id for c in claims] == ids[::2]
    assert [c.args for c in claims] == [{"n": n} for n in range(0, 800, 2)]


# -- client encodings: the COPY sends what the INSERT sends ------------------------------


def _texts_everywhere(count: int = 600) -> list[dict[str, Any]]:
    """Jobs with awkward text, beyond ASCII included, in every field sent as text."""
    jobs: list[dict[str, Any]] = []
    for n in range(count):
        text = AWKWARD[n % len(AWKWARD)]
        jobs.append({"task": f"task {text}", "args": {"n": n, "text": text},
                     "queue": f"queue {text}", "key": f"key {text} {n}",
                     "limit_key": f"limit {text}"})
    return jobs


STORED = ["queue", "task", "args", "priority", "key", "max_attempts", "limit_key", "status"]


def _stored(db: psycopg.Connection[Any], ids: list[int]) -> list[dict[str, Any]]:
    """The jobs as stored, read back in UTF8, in the order of `ids`."""
    rows = db.execute(f"SELECT id, {', '.join(STORED)} FROM jobs"  # type: ignore[arg-type]
                      " WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()
    assert [row["id"] for row in rows] == ids
    return [{name: row[name] for name in STORED} for row in rows]


def _as_given(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"priority": 0, "max_attempts": 5, "status": "pending", **job} for job in jobs]


@pytest.mark.parametrize("via", ["pool", "conn"])
def test_a_connection_in_sql_ascii_copies_what_the_insert_writes(
    queue, dsn, db, via, monkeypatch
):
    """A client_encoding of SQL_ASCII (the queue's DSN, or the caller's connection):
    psycopg sends a str parameter as UTF-8 there, so the INSERT stores text beyond ASCII
    as given; the COPY sends the same bytes and stores the same rows (it raised a bare
    UnicodeEncodeError, encoding its text to ASCII). The queue's own connections talk
    UTF8 whatever the DSN says: there the DSN's encoding changes nothing."""
    ascii_dsn = in_client_encoding(dsn, "SQL_ASCII")
    jobs = _texts_everywhere()
    with (pgbaton.Queue(ascii_dsn, schema=queue.schema) as theirs,
          psycopg.connect(ascii_dsn) as conn):
        assert conn.info.parameter_status("client_encoding") == "SQL_ASCII"
        copies = _counted_copies(theirs, monkeypatch)
        options = {"conn": conn} if via == "conn" else {}
        theirs.copy_min_jobs = len(jobs) + 1
        inserted = theirs.enqueue_many(jobs, **options)
        theirs.copy_min_jobs = len(jobs)
        copied = theirs.enqueue_many(jobs, **options)
        conn.commit()
    assert copies == [len(jobs)]
    assert _stored(db, copied) == _stored(db, inserted) == _as_given(jobs)


@pytest.mark.parametrize("via", ["pool", "conn"])
async def test_an_async_connection_in_sql_ascii_copies_what_the_insert_writes(
    aqueue, dsn, db, via, monkeypatch
):
    """AsyncQueue's COPY under SQL_ASCII, as the sync one's."""
    ascii_dsn = in_client_encoding(dsn, "SQL_ASCII")
    jobs = _texts_everywhere()
    async with (pgbaton.AsyncQueue(ascii_dsn, schema=aqueue.schema) as theirs,
                await psycopg.AsyncConnection.connect(ascii_dsn) as conn):
        copies = _counted_copies(theirs, monkeypatch)
        options = {"conn": conn} if via == "conn" else {}
        theirs.copy_min_jobs = len(jobs) + 1
        inserted = await theirs.enqueue_many(jobs, **options)
        theirs.copy_min_jobs = len(jobs)
        copied = await theirs.enqueue_many(jobs, **options)
        await conn.commit()
    assert copies == [len(jobs)]
    assert _stored(db, copied) == _stored(db, inserted) == _as_given(jobs)


UNENCODABLE = UNENCODABLE_FIELDS


def _with_bad_job(field: str, count: int = 600) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = [{"task": "t", "args": {"n": n, "text": "café"}}
                                  for n in range(count)]
    jobs[597] = {**jobs[597], **UNENCODABLE[field][0]}
    return jobs


def _refused(field: str) -> str:
    return (f"^job 597: {UNENCODABLE[field][1]} cannot be sent: the connection's client "
            "encoding latin-1 has no '€' \\(U\\+20AC\\); nothing was written")


CASES = [*(("INSERT", field) for field in UNENCODABLE),
         *(("COPY", field) for field in UNENCODABLE if field != "idempotency_key")]


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_text_a_callers_connection_cannot_carry_is_named_and_nothing_is_written(
    queue, dsn, case, monkeypatch
):
    """A caller's connection whose client_encoding lacks a character of some job's text
    (LATIN1 and the euro sign): the INSERT and the COPY both refuse the batch with
    InvalidArgument naming the job, the field and the encoding, before anything is
    written; in the caller's transaction the job enqueued before it stays (both raised
    a bare UnicodeEncodeError)."""
    path, field = case
    latin1_dsn = in_client_encoding(dsn, "LATIN1")
    jobs = _with_bad_job(field)
    with (pgbaton.Queue(latin1_dsn, schema=queue.schema) as theirs,
          psycopg.connect(latin1_dsn) as conn):
        copies = _counted_copies(theirs, monkeypatch)
        theirs.copy_min_jobs = len(jobs) + (path == "INSERT")
        kept = theirs.enqueue("kept", {"text": "café"}, conn=conn)
        with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
            theirs.enqueue_many(jobs, conn=conn)
        conn.commit()  # the caller's transaction is still usable
    assert copies == ([len(jobs)] if path == "COPY" else [])
    assert [job.id for job in queue.jobs()] == [kept]


def _stored_in_full(db: psycopg.Connection[Any], ids: list[int]) -> list[dict[str, Any]]:
    """The jobs `ids` as stored (read back in UTF8), in their order, with their
    idempotency keys; see _given_in_full."""
    columns = ["idempotency_key", *STORED]
    rows = db.execute(f"SELECT id, {', '.join(columns)} FROM jobs"  # type: ignore[arg-type]
                      " WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()
    assert [row["id"] for row in rows] == ids
    return [{name: row[name] for name in columns} for row in rows]


def _given_in_full(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"queue": "default", "key": None, "limit_key": None, "idempotency_key": None,
             **job} for job in _as_given(jobs)]


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_text_beyond_a_dsns_client_encoding_is_written_on_the_queues_own_connections(
    queue, dsn, db, case, monkeypatch
):
    """The same batch on the queue's own connections, its DSN in LATIN1: they talk
    UTF8 whatever the DSN says, and the INSERT and the COPY store every job as given."""
    path, field = case
    jobs = _with_bad_job(field)
    with pgbaton.Queue(in_client_encoding(dsn, "LATIN1"), schema=queue.schema) as theirs:
        copies = _counted_copies(theirs, monkeypatch)
        theirs.copy_min_jobs = len(jobs) + (path == "INSERT")
        ids = theirs.enqueue_many(jobs)
    assert copies == ([len(jobs)] if path == "COPY" else [])
    assert _stored_in_full(db, ids) == _given_in_full(jobs)


@pytest.mark.parametrize("via", ["pool", "conn"])
@pytest.mark.parametrize("path", ["INSERT", "COPY"])
async def test_an_async_batch_beyond_latin1_is_refused_by_a_callers_connection_only(
    aqueue, dsn, db, via, path
):
    """AsyncQueue, by either path: a caller's connection in LATIN1 refuses such a batch
    as Queue's does; the queue's own connections store it as given."""
    latin1_dsn = in_client_encoding(dsn, "LATIN1")
    jobs = _with_bad_job("queue")
    async with (pgbaton.AsyncQueue(latin1_dsn, schema=aqueue.schema) as theirs,
                await psycopg.AsyncConnection.connect(latin1_dsn) as conn):
        theirs.copy_min_jobs = len(jobs) + (path == "INSERT")
        kept = await theirs.enqueue("kept", conn=conn)
        if via == "conn":
            with pytest.raises(pgbaton.InvalidArgument, match=_refused("queue")):
                await theirs.enqueue_many(jobs, conn=conn)
        else:
            ids = await theirs.enqueue_many(jobs)
        await conn.commit()
    if via == "conn":
        assert [job.id for job in await aqueue.jobs()] == [kept]
    else:
        assert _stored_in_full(db, ids) == _given_in_full(jobs)
