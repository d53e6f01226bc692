"""Unique jobs (docs/howto/unique.md): what makes two jobs the same, the windows of a
period, the states that block, and what an enqueue that meets a blocking job does."""

from __future__ import annotations

import datetime as dt
import math

import psycopg
import pytest

import pgbaton
from pgbaton.unique import Unique

UTC = dt.UTC


def _rows(db: psycopg.Connection) -> list[dict]:
    return db.execute(
        "SELECT id, task, args, status, run_at, priority, unique_key IS NOT NULL AS keyed,"
        " unique_states FROM jobs ORDER BY id"
    ).fetchall()


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"period": 0}, "period"),
        ({"period": -5}, "period"),
        ({"period": math.inf}, "period"),
        ({"period": math.nan}, "period"),
        ({"period": True}, "period"),
        ({"period": "3600"}, "period"),
        ({"period": 0.0001}, "period"),
        ({"period": 1e12}, "period"),
        ({"states": ("pending", "running", "paused")}, "'paused'"),
        ({"states": ("pending",)}, "must include pending and running"),
        ({"states": "pending"}, "list of states"),
        ({"conflict": "merge"}, "'merge'"),
        ({"conflict": "debounce"}, "needs delay="),
        ({"conflict": "debounce", "delay": 0}, "delay"),
        ({"conflict": "debounce", "delay": math.nan}, "delay"),
        ({"conflict": "keep", "delay": 5}, "debounce"),
        ({"args": "customer_id"}, "list of arg names"),
        ({"args": ["a", ""]}, "not an arg name"),
        ({"args": [1]}, "not an arg name"),
        ({"queue": "yes"}, "queue="),
    ],
)
def test_a_bad_unique_is_refused_naming_its_problem(options, says):
    """Each bad option of Unique raises InvalidArgument, one line, naming what is wrong."""
    with pytest.raises(pgbaton.InvalidArgument) as raised:
        Unique(**options)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_unique_beside_what_it_cannot_go_with_writes_nothing(queue, db):
    """unique= with after=, with an idempotency key, debounce with a run_at or delay, or
    not a Unique at all: InvalidArgument, and no row is written."""
    parent = queue.enqueue("parent")
    calls = [
        lambda: queue.enqueue("t", unique=Unique(), after=[parent]),
        lambda: queue.enqueue("t", unique=Unique(), idempotency_key="k"),
        lambda: queue.enqueue_once("t", unique=Unique(), idempotency_key="k"),
        lambda: queue.enqueue("t", unique=Unique(conflict="debounce", delay=5), delay=1),
        lambda: queue.enqueue("t", unique=Unique(conflict="debounce", delay=5),
                              run_at=dt.datetime.now(UTC)),
        lambda: queue.enqueue("t", unique={"args": ["a"]}),  # type: ignore[arg-type]
        lambda: queue.enqueue_once("t"),
    ]
    for call in calls:
        with pytest.raises(pgbaton.InvalidArgument):
            call()
    assert [row["id"] for row in _rows(db)] == [parent]


def test_a_task_refuses_unique_args_its_handler_does_not_take():
    """@app.task(unique=Unique(args=[...])) and using(unique=...) naming an arg the
    handler does not take raise InvalidArgument naming it; **kwargs takes any."""
    app = pgbaton.App("postgresql://nowhere/none")
    with pytest.raises(pgbaton.InvalidArgument, match="'customer'"):
        @app.task(unique=Unique(args=["customer"]))
        def sync(customer_id: int) -> None: ...

    @app.task
    def sync_customer(customer_id: int) -> None: ...

    with pytest.raises(pgbaton.InvalidArgument, match="'tenant'"):
        sync_customer.using(unique=Unique(args=["tenant"])).defer(customer_id=1)

    @app.task(unique=Unique(args=["anything"]))
    def loose(**kwargs: object) -> None: ...

    assert loose.unique == Unique(args=["anything"])


# -- keep -----------------------------------------------------------------------------


def test_keep_returns_the_existing_job_and_writes_nothing(queue, db):
    """A second enqueue of a unique key returns the first job's id; enqueue_once says
    created False, outcome "kept", and its status; args outside Unique(args=) differ."""
    unique = Unique(args=["customer_id"])
    first = queue.enqueue("sync", {"customer_id": 7, "reason": "a"}, unique=unique)
    assert queue.enqueue("sync", {"customer_id": 7, "reason": "b"}, unique=unique) == first
    again = queue.enqueue_once("sync", {"customer_id": 7, "reason": "c"}, unique=unique)
    assert again == pgbaton.Enqueued(id=first, created=False, outcome="kept", status="pending")
    other = queue.enqueue_once("sync", {"customer_id": 8}, unique=unique)
    assert other.created and other.outcome == "created" and other.id != first
    rows = _rows(db)
    assert [(r["id"], r["args"]) for r in rows] == [
        (first, {"customer_id": 7, "reason": "a"}), (other.id, {"customer_id": 8})]
    assert rows[0]["unique_states"] == ["pending", "running", "waiting"]


def test_what_counts_task_args_and_queue(queue, db):
    """All args count by default (their key order does not); another task, another
    queue with queue=True, and an absent arg against a null one make new jobs."""
    every = Unique()
    a = queue.enqueue("t", {"x": 1, "y": 2}, unique=every)
    assert queue.enqueue("t", {"y": 2, "x": 1}, unique=every) == a
    assert queue.enqueue("t", {"x": 1, "y": 3}, unique=every) != a
    assert queue.enqueue("other", {"x": 1, "y": 2}, unique=every) != a
    assert queue.enqueue("t", {"x": 1, "y": 2}, queue="q2", unique=every) == a
    by_queue = Unique(queue=True)
    b = queue.enqueue("t", {"z": 1}, unique=by_queue)
    assert queue.enqueue("t", {"z": 1}, queue="q2", unique=by_queue) != b
    named = Unique(args=["n"])
    c = queue.enqueue("t", {"n": None}, unique=named)
    assert queue.enqueue("t", {}, unique=named) != c
    assert queue.enqueue("t", {"n": None, "m": 5}, unique=named) == c
    assert len(_rows(db)) == 7


def test_a_job_that_leaves_its_states_lets_the_next_one_in(queue, db):
    """Pending and running block; once done (or failed, or cancelled) the next enqueue
    makes a new job. With "done" among the states, a done job blocks too."""
    unique = Unique(args=[])
    first = queue.enqueue("t", unique=unique)
    (claim,) = queue.claim("w")
    assert claim.id == first
    assert queue.enqueue_once("t", unique=unique) == pgbaton.Enqueued(
        first, False, "kept", "running")
    assert queue.complete(claim)
    second = queue.enqueue("t", unique=unique)
    assert second != first
    assert queue.cancel(second)
    third = queue.enqueue("t", unique=unique)
    assert third not in (first, second)

    sticky = Unique(args=[], states=("pending", "running", "done"))
    done = queue.enqueue("s", unique=sticky)
    (claim,) = queue.claim("w", tasks=["s"])
    assert queue.complete(claim)
    assert queue.enqueue("s", unique=sticky) == done
    counted = db.execute(
        "SELECT task, count(*) FILTER (WHERE status = ANY (unique_states)) AS blocking"
        " FROM jobs GROUP BY task ORDER BY task").fetchall()
    assert counted == [{"task": "s", "blocking": 1}, {"task": "t", "blocking": 1}]


def test_a_failed_attempt_back_to_pending_keeps_blocking(queue, db):
    """A running job whose attempt fails goes back to pending in the index, without a
    conflict, and still blocks."""
    unique = Unique(args=[])
    first = queue.enqueue("t", unique=unique)
    (claim,) = queue.claim("w")
    assert queue.fail(claim, "boom", retry_in=0)
    assert queue.enqueue("t", unique=unique) == first
    assert [r["status"] for r in _rows(db)] == ["pending"]


# -- windows --------------------------------------------------------------------------


def test_windows_are_cut_from_the_epoch_by_run_at(queue, db):
    """period=3600: 10:59:59.999999 and 11:00:00 are two windows, 11:00:00 and
    11:59:59.999999 one. period=7, which divides no hour: the windows start at
    multiples of 7 s since 1970, in whatever minute they fall."""
    hourly = Unique(period=3600)
    at = dt.datetime(2030, 5, 1, 11, 0, tzinfo=UTC)
    eleven = queue.enqueue("r", run_at=at, unique=hourly)
    assert queue.enqueue("r", run_at=at + dt.timedelta(minutes=59, seconds=59,
                                                       microseconds=999999),
                         unique=hourly) == eleven
    before = queue.enqueue("r", run_at=at - dt.timedelta(microseconds=1), unique=hourly)
    assert before != eleven
    noon = queue.enqueue("r", run_at=at + dt.timedelta(hours=1), unique=hourly)
    assert noon not in (eleven, before)

    seven = Unique(period=7)
    start = dt.datetime.fromtimestamp(7 * 270_000_000, UTC)  # a multiple of 7 s
    w = queue.enqueue("s", run_at=start, unique=seven)
    assert queue.enqueue("s", run_at=start + dt.timedelta(seconds=6.999999),
                         unique=seven) == w
    assert queue.enqueue("s", run_at=start + dt.timedelta(seconds=7), unique=seven) != w
    assert queue.enqueue("s", run_at=start - dt.timedelta(microseconds=1),
                         unique=seven) != w
    assert len(_rows(db)) == 6


def test_a_job_due_now_falls_in_the_window_of_now(queue, db):
    """Without run_at, the window is the server's now(): two enqueues a moment apart
    with a ten-year period are one job; with another period they are another key."""
    first = queue.enqueue("r", {"t": 1}, unique=Unique(period=10 * 365 * 24 * 3600))
    assert queue.enqueue("r", {"t": 1}, unique=Unique(period=10 * 365 * 24 * 3600)) == first
    assert queue.enqueue("r", {"t": 1}, unique=Unique(period=9 * 365 * 24 * 3600)) != first


# -- transactions and the task API ----------------------------------------------------


def test_a_rolled_back_enqueue_lets_the_next_one_in(queue, dsn, db):
    """A unique job written in the caller's transaction that rolls back blocks nothing;
    one that commits blocks the next."""
    unique = Unique(args=[])
    with psycopg.connect(dsn) as conn:
        queue.enqueue("t", unique=unique, conn=conn)
        conn.rollback()
        kept = queue.enqueue("t", unique=unique, conn=conn)
        conn.commit()
    assert queue.enqueue("t", unique=unique) == kept
    assert [r["id"] for r in _rows(db)] == [kept]


def test_the_task_its_using_and_a_call_can_each_give_unique(dsn, schema, db, queue):
    """@app.task(unique=) applies to every enqueue of the task; using(unique=) and
    enqueue(unique=) override it; unique=None turns it off for one call."""
    app = pgbaton.App(dsn, schema=schema)

    @app.task(unique=Unique(args=["customer_id"]))
    def sync_customer(customer_id: int, reason: str = "") -> None: ...

    first = sync_customer.defer(customer_id=1, reason="a")
    assert sync_customer.defer(customer_id=1, reason="b") == first
    assert sync_customer.enqueue({"customer_id": 1}) == first
    once = sync_customer.enqueue_once({"customer_id": 1})
    assert (once.id, once.created, once.outcome) == (first, False, "kept")
    assert sync_customer.using(unique=Unique()).defer(customer_id=1, reason="c") != first
    assert sync_customer.enqueue({"customer_id": 1}, unique=None) != first
    assert len(_rows(db)) == 3
    app.queue.close()


def test_a_plain_enqueue_runs_the_one_statement_it_ran_before(queue, monkeypatch):
    """Without unique=, enqueue sends exactly one statement, job_insert: uniqueness costs
    a plain enqueue nothing."""
    sent: list[str] = []
    fetch = queue._fetch

    def counting(name, *args, **kwargs):
        sent.append(name)
        return fetch(name, *args, **kwargs)

    monkeypatch.setattr(queue, "_fetch", counting)
    queue.enqueue("t", {"n": 1})
    assert sent == ["job_insert"]
    sent.clear()
    queue.enqueue("t", {"n": 1}, unique=Unique())
    assert sent == ["job_insert_unique"]


def test_enqueue_once_with_an_idempotency_key_works_as_before(queue, db):
    """enqueue_once(idempotency_key=) is unchanged: created once, then the same job."""
    first = queue.enqueue_once("t", idempotency_key="k")
    assert first.created and first.outcome == "created"
    again = queue.enqueue_once("t", idempotency_key="k")
    assert (again.id, again.created, again.outcome) == (first.id, False, "kept")


def test_hostile_args_make_keys_not_statements(queue, db):
    """Args that look like SQL or markup, and non-ASCII ones, are hashed like any other."""
    unique = Unique(args=["name"])
    names = ["'); DROP TABLE jobs; --", "<script>alert(1)</script>", "名前", "a" * 10_000]
    ids = [queue.enqueue("t", {"name": n}, unique=unique) for n in names]
    assert [queue.enqueue("t", {"name": n}, unique=unique) for n in names] == ids
    assert len(set(ids)) == 4 and len(_rows(db)) == 4
