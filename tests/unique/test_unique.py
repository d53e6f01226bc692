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


# -- replace and debounce -------------------------------------------------------------


def _job(db: psycopg.Connection, job_id: int) -> dict:
    row = db.execute(
        "SELECT args, priority, run_at, status, now() AS now FROM jobs WHERE id = %s",
        (job_id,)).fetchone()
    assert row is not None
    return row


def test_replace_gives_a_pending_job_the_new_args_priority_and_run_at(queue, db):
    """conflict="replace": the pending job of the key keeps its id and takes the new
    args, priority and run_at; the call says "replaced"."""
    unique = Unique(args=["tenant"], conflict="replace")
    later = dt.datetime(2031, 1, 1, tzinfo=UTC)
    first = queue.enqueue_once("r", {"tenant": "a", "v": 1}, unique=unique)
    assert (first.created, first.outcome) == (True, "created")
    again = queue.enqueue_once("r", {"tenant": "a", "v": 2}, priority=5, run_at=later,
                               unique=unique)
    assert again == pgbaton.Enqueued(first.id, False, "replaced", "pending")
    row = _job(db, first.id)
    assert (row["args"], row["priority"], row["run_at"]) == ({"tenant": "a", "v": 2}, 5, later)
    assert len(_rows(db)) == 1


def test_replace_and_debounce_keep_a_running_job_and_say_so(queue, db):
    """A running job of the key is neither changed nor locked: the call says "kept"
    with status "running", and the job's worker completes it as usual."""
    for conflict, options in (("replace", {}), ("debounce", {"delay": 60})):
        unique = Unique(args=[], conflict=conflict, **options)  # type: ignore[arg-type]
        job_id = queue.enqueue(conflict, {"v": 1}, unique=unique)
        db.execute("UPDATE jobs SET run_at = now() WHERE id = %s", (job_id,))  # due
        (claim,) = queue.claim("w", tasks=[conflict])
        told = queue.enqueue_once(conflict, {"v": 2}, unique=unique)
        assert told == pgbaton.Enqueued(job_id, False, "kept", "running")
        assert _job(db, job_id)["args"] == {"v": 1}
        assert queue.complete(claim)
        assert queue.enqueue(conflict, {"v": 3}, unique=unique) != job_id


def test_debounce_pushes_the_job_back_at_each_call(queue, db):
    """conflict="debounce": a new job is due delay seconds from now; each later call
    moves the pending job's run_at to now plus delay and gives it its args."""
    unique = Unique(args=["index"], conflict="debounce", delay=30)
    first = queue.enqueue_once("reindex", {"index": "docs", "n": 1}, unique=unique)
    row = _job(db, first.id)
    assert dt.timedelta(seconds=29) < row["run_at"] - row["now"] <= dt.timedelta(seconds=30)
    db.execute("UPDATE jobs SET run_at = run_at - interval '20 seconds'")
    again = queue.enqueue_once("reindex", {"index": "docs", "n": 2}, unique=unique)
    assert again == pgbaton.Enqueued(first.id, False, "debounced", "pending")
    row = _job(db, first.id)
    assert row["args"] == {"index": "docs", "n": 2}
    assert dt.timedelta(seconds=29) < row["run_at"] - row["now"] <= dt.timedelta(seconds=30)
    assert queue.claim("w") == []  # not due while the calls go on
    assert len(_rows(db)) == 1


def test_a_replace_rolled_back_changes_nothing(queue, dsn, db):
    """A replace in the caller's transaction that rolls back leaves the job as it was;
    until it ends, the job is locked and no claim takes it half-replaced."""
    unique = Unique(args=[], conflict="replace")
    job_id = queue.enqueue("r", {"v": 1}, unique=unique)
    with psycopg.connect(dsn) as conn:
        assert queue.enqueue("r", {"v": 2}, unique=unique, conn=conn) == job_id
        assert queue.claim("w") == []
        conn.rollback()
    assert _job(db, job_id)["args"] == {"v": 1}
    assert [c.id for c in queue.claim("w")] == [job_id]


def test_kept_replaced_and_debounced_enqueues_are_events(queue, db):
    """job.unique_kept, job.unique_replaced and job.unique_debounced name the existing
    job and its status; a created unique job is job.enqueued."""
    heard: list[pgbaton.Event] = []
    queue.events.subscribe(heard.append)
    keep = queue.enqueue("k", unique=Unique())
    queue.enqueue("k", unique=Unique())
    replaced = queue.enqueue("r", unique=Unique(conflict="replace"))
    queue.enqueue("r", unique=Unique(conflict="replace"))
    debounced = queue.enqueue("d", unique=Unique(conflict="debounce", delay=5))
    queue.enqueue("d", unique=Unique(conflict="debounce", delay=5))
    assert queue.events.flush()
    assert [(e.name, e.job_id, e.task, (e.detail or {}).get("status")) for e in heard] == [
        ("job.enqueued", keep, "k", "pending"),
        ("job.unique_kept", keep, "k", "pending"),
        ("job.enqueued", replaced, "r", "pending"),
        ("job.unique_replaced", replaced, "r", "pending"),
        ("job.enqueued", debounced, "d", "pending"),
        ("job.unique_debounced", debounced, "d", "pending"),
    ]


# -- visible --------------------------------------------------------------------------


def test_a_jobs_unique_key_and_states_are_on_job(queue, db):
    """Queue.get gives the key (SHA-256 in hex, as stored) and the states; a plain job
    has None for both."""
    job_id = queue.enqueue("t", unique=Unique(states=("pending", "running", "failed")))
    job = queue.get(job_id)
    assert job is not None
    stored = db.execute("SELECT encode(unique_key, 'hex') AS k FROM jobs").fetchone()
    assert (job.unique_key, job.unique_states) == (stored["k"], ["pending", "running", "failed"])
    plain = queue.get(queue.enqueue("t"))
    assert plain is not None and (plain.unique_key, plain.unique_states) == (None, None)


def test_an_operator_retry_into_a_taken_key_is_refused_plainly(queue, db):
    """Retrying a failed unique job while a newer job of its key is pending would hold
    two of the key: InvalidArgument naming the job, and nothing changes."""
    unique = Unique(args=[])
    old = queue.enqueue("t", unique=unique, max_attempts=1)
    (claim,) = queue.claim("w")
    assert queue.fail(claim, "boom")
    newer = queue.enqueue("t", unique=unique)
    with pytest.raises(pgbaton.InvalidArgument, match=f"job {old} cannot be sent back"):
        queue.retry(old)
    assert [(r["id"], r["status"]) for r in _rows(db)] == [(old, "failed"), (newer, "pending")]
    assert queue.cancel(newer)
    assert queue.retry(old)
