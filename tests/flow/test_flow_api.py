"""The flow-control API and command line on a real database: settings are stored and
shown, obeyed by the next claim, refused with one clear line when they make no sense,
and left untouched by a refused call."""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import psycopg.conninfo
import pytest

import pgbaton
from pgbaton.flow import Rate, parse_rate
from tests.cli.cli_helpers import pgbaton as run_pgbaton


def _settings(queue: pgbaton.Queue, name: str):
    [settings] = queue.queue_settings(name)
    return settings


@pytest.mark.parametrize(
    ("text", "rate"),
    [("100/s", Rate(100, 1.0)), ("10/min", Rate(10, 60.0)), ("5/2h", Rate(5, 7200.0)),
     (" 3 / 250ms ", Rate(3, 0.25)), ("1/day", Rate(1, 86400.0)), ((7, 0.5), Rate(7, 0.5)),
     (None, None)],
)
def test_rates_are_read_from_text_pairs_and_rates(text, rate):
    """A rate is text such as '100/s', a (limit, seconds) pair or a Rate."""
    assert parse_rate(text) == rate


@pytest.mark.parametrize(
    ("rate", "message"),
    [("0/s", "allows 0 starts per window: the limit must be at least 1"),
     ("-1/s", "allows -1 starts per window: the limit must be at least 1"),
     ("100000/s", "allows 100000 starts per window: the limit must be at most 10,000"),
     ("\uff15/s", "holds '\uff15' .U+FF15 FULLWIDTH DIGIT FIVE., which is not ASCII"),
     ("5/fortnight", "is not understood"),
     ("1/0s", "rate period of 0 s is out of range"),
     ("1/30d", "rate period of 2.592e+06 s is out of range"),
     ("fast", "is not understood"),
     ((1, float("nan")), "out of range"),
     ((True, 1), "must be a whole number"),
     (12, "rate must be text such as '100/s'")],
)
def test_absurd_rates_are_refused_with_one_line(queue: pgbaton.Queue, db, rate, message):
    """Nothing is written for a rate that cannot be meant."""
    with pytest.raises(pgbaton.InvalidArgument, match=message.replace("+", r"\+")) as caught:
        queue.set_rate("emails", rate)
    assert "\n" not in str(caught.value)
    assert db.execute("SELECT count(*) AS n FROM queues").fetchone() == {"n": 0}


@pytest.mark.parametrize("concurrency", [0, -3, 100_001, 2.5, "8", True])
def test_bad_concurrency_is_refused(queue: pgbaton.Queue, db, concurrency):
    """Concurrency is a whole number from 1 up (pause a queue to run none of it)."""
    with pytest.raises(pgbaton.InvalidArgument, match="concurrency must be"):
        queue.set_concurrency("emails", concurrency)
    assert db.execute("SELECT count(*) AS n FROM queues").fetchone() == {"n": 0}


def test_settings_are_stored_changed_removed_and_shown(queue: pgbaton.Queue):
    """set_concurrency and set_rate change only their own limit; None removes it; pause
    and resume keep the limits; queue_settings lists queues with jobs too."""
    queue.enqueue("t", queue="plain")
    assert queue.set_concurrency("emails", 8).concurrency == 8
    settings = queue.set_rate("emails", "100/s")
    assert (settings.concurrency, settings.rate) == (8, Rate(100, 1.0))
    queue.pause("emails")
    assert _settings(queue, "emails").paused
    queue.resume("emails")
    settings = _settings(queue, "emails")
    assert (settings.paused, settings.concurrency, settings.rate) == (False, 8, Rate(100, 1.0))
    assert queue.set_concurrency("emails", None).rate == Rate(100, 1.0)
    assert queue.set_rate("emails", None).rate is None
    names = [s.name for s in queue.queue_settings()]
    assert names == ["emails", "plain"]
    assert _settings(queue, "plain").paused is False


def test_the_next_claim_obeys_each_setting(queue: pgbaton.Queue):
    """Claims made right after a setting obey it, from the same handle or another."""
    queue.enqueue_many([{"task": "t", "queue": "q"}] * 10)
    with pgbaton.Queue(queue.dsn, schema=queue.schema) as operator:
        operator.pause("q")
        # This handle still thinks nothing is controlled: its plain claim leaves q alone.
        assert queue.claim("w", limit=10) == []
        operator.resume("q")
        operator.set_concurrency("q", 3)
    claims = queue.claim("w", limit=10)
    assert len(claims) == 3
    assert queue.claim("w", limit=10) == []
    queue.complete(claims[0])
    assert len(queue.claim("w", limit=10)) == 1
    assert _settings(queue, "q").held == 3


def test_a_claim_takes_the_room_of_its_own_finished_jobs_before_they_are_written(
    queue: pgbaton.Queue, db
):
    """claim_batch(finished=tokens): jobs whose handlers ended and whose completions are
    not written yet no longer count against the limit in that claim, and in no other
    worker's; a token that is not a held job's frees nothing; tokens that are not UUIDs
    are refused before anything runs."""
    queue.enqueue_many([{"task": "t", "queue": "q"}] * 10)
    queue.set_concurrency("q", 3)
    held = queue.claim("w", limit=10)
    assert len(held) == 3
    assert queue.claim_batch("other", limit=10).claims == []
    assert queue.claim_batch("w", limit=10, finished=[uuid.uuid4()]).claims == []
    batch = queue.claim_batch("w", limit=10, finished=[held[0].token, held[1].token])
    assert len(batch.claims) == 2  # two handlers ended; the third still runs
    # The database still counts the two finished ones until their completions commit.
    assert _settings(queue, "q").held == 5
    assert queue.complete_many([(held[0], None), (held[1], None)]) == [True, True]
    assert _settings(queue, "q").held == 3
    assert queue.claim_batch("other", limit=10).claims == []
    with pytest.raises(pgbaton.InvalidArgument, match="finished must hold claim tokens"):
        queue.claim_batch("w", limit=10, finished=["not-a-token"])  # type: ignore[list-item]
    statuses = db.execute("SELECT status, count(*) AS n FROM jobs GROUP BY status "
                          "ORDER BY status").fetchall()
    assert statuses == [{"status": "done", "n": 2}, {"status": "pending", "n": 5},
                        {"status": "running", "n": 3}]


def _wakeups_before_sentinel(listener: psycopg.Connection, queue: pgbaton.Queue) -> list[str]:
    """The payloads the fleet was sent on the queue's channel, up to a sentinel sent now
    (notifications arrive in commit order, so nothing sent earlier comes after it)."""
    with psycopg.connect(queue.dsn, autocommit=True) as sender:
        sender.execute("SELECT pg_notify(%s, 'sentinel')", (queue.channel,))
    payloads = []
    for note in listener.notifies(timeout=10):
        if note.payload == "sentinel":
            return payloads
        payloads.append(note.payload)
    raise AssertionError("the sentinel notification never arrived")


def test_the_fleet_is_woken_only_for_room_the_claim_made_with_it_did_not_take(
    queue: pgbaton.Queue,
):
    """Completions of a limited queue make room; a claim passing them as finished takes
    what it can, and notify_freed(..., taken=those claims) wakes the rest of the fleet
    (the queue's name on the channel) only when some room is left over."""
    queue.enqueue_many([{"task": "t", "queue": "q"}] * 5)
    queue.set_concurrency("q", 2)
    with psycopg.connect(queue.dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{queue.channel}"')
        first = queue.claim("w", limit=10)
        assert len(first) == 2
        batch = queue.claim_batch("w", limit=10, finished=[c.token for c in first])
        assert len(batch.claims) == 2  # all the room taken: nobody else to wake
        queue.complete_many([(c, None) for c in first])
        queue.notify_freed(first, taken=batch.claims)
        assert _wakeups_before_sentinel(listener, queue) == []
        second = batch.claims
        batch = queue.claim_batch("w", limit=10, finished=[c.token for c in second])
        assert len(batch.claims) == 1  # the last job: one place left in the queue
        queue.complete_many([(c, None) for c in second])
        queue.notify_freed(second, taken=batch.claims)
        assert _wakeups_before_sentinel(listener, queue) == ["q"]
        queue.notify_freed(batch.claims)  # a plain write's wake-up, nothing taken
        assert _wakeups_before_sentinel(listener, queue) == ["q"]


def test_a_rate_limited_claim_says_when_the_next_start_is_due(queue: pgbaton.Queue):
    """Once the window is full the claim gets nothing, and is told in how many seconds
    the first start leaves the window."""
    queue.enqueue_many([{"task": "t", "queue": "q"}] * 5)
    queue.set_rate("q", "2/10s")
    first = queue.claim_batch("w", limit=5)
    assert len(first.claims) == 2
    assert first.next_slot_in is not None and 9.0 < first.next_slot_in <= 10.0
    empty = queue.claim_batch("w", limit=5)
    assert empty.claims == []
    assert empty.next_slot_in is not None and empty.next_slot_in <= first.next_slot_in


def test_app_limit_checks_what_it_is_given():
    """App.limit refuses a limit that names nothing or makes no sense, at import time."""
    app = pgbaton.App("postgresql://nowhere/none")
    app.limit("emails", concurrency=8, rate="100/s")
    assert app.queue_limits == {"emails": (8, Rate(100, 1.0))}
    with pytest.raises(pgbaton.InvalidArgument, match="names no limit"):
        app.limit("emails")
    with pytest.raises(pgbaton.InvalidArgument, match="is not understood"):
        app.limit("emails", rate="lots")


def test_the_command_line_pauses_limits_shows_and_refuses(dsn, schema, queue, db):
    """`pgbaton queue`: unknown queues, bad limits and empty changes are one-line errors
    with nothing written; the rest changes the settings and shows them."""
    def run(*args: str):
        return run_pgbaton("queue", *args, "--schema", schema, dsn=dsn)

    unknown = run("pause", "emials")
    assert unknown.returncode == 1
    assert unknown.stderr.count("\n") == 1
    assert "unknown queue 'emials'" in unknown.stderr and "--new" in unknown.stderr
    for args, message in [
        (("limit", "emails", "--new", "--concurrency", "-1"), "concurrency must be 1 to"),
        (("limit", "emails", "--new", "--concurrency", "many"), "not a whole number"),
        (("limit", "emails", "--new", "--rate", "1/0s"), "out of range"),
        (("limit", "emails", "--new"), "give --concurrency, --rate, --key-concurrency"),
    ]:
        result = run(*args)
        assert result.returncode in (1, 2), result
        assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert db.execute("SELECT count(*) AS n FROM queues").fetchone() == {"n": 0}

    queue.enqueue("t", queue="emails")
    assert run("pause", "emails").returncode == 0
    limited = run("limit", "emails", "--concurrency", "8", "--rate", "100/min", "--json")
    assert limited.returncode == 0, limited.stderr
    [shown] = json.loads(limited.stdout)
    assert (shown["paused"], shown["concurrency"], shown["rate"]) == (True, 8, "100/min")
    assert run("resume", "emails").returncode == 0
    assert run("limit", "emails", "--concurrency", "none").returncode == 0
    [shown] = json.loads(run("show", "emails", "--json").stdout)
    assert (shown["paused"], shown["concurrency"], shown["rate"]) == (False, None, "100/min")
    table = run("show")
    assert table.returncode == 0 and "emails" in table.stdout


def test_per_key_limits_count_each_limit_key_apart(queue: pgbaton.Queue, db):
    """Per-key concurrency and rate hold for each limit key on its own; jobs without a
    limit key obey only the queue's limits; a bad limit key is refused."""
    queue.enqueue_many([{"task": "t", "limit_key": key} for key in "aabbb"] + [{"task": "t"}] * 2)
    queue.set_key_concurrency("default", 1)
    queue.set_key_rate("default", "2/1h")
    first = queue.claim("w", limit=10)
    assert sorted(c.id for c in first) == [1, 3, 6, 7]
    assert queue.claim("w", limit=10) == []  # each key holds its one
    for claim in first:
        queue.complete(claim)
    second = queue.claim("w", limit=10)
    assert sorted(c.id for c in second) == [2, 4]
    for claim in second:
        queue.complete(claim)
    assert queue.claim("w", limit=10) == []  # b started twice this hour
    settings = _settings(queue, "default")
    assert (settings.key_concurrency, settings.key_rate) == (1, Rate(2, 3600.0))
    with pytest.raises(pgbaton.InvalidArgument, match="limit_key"):
        queue.enqueue("t", limit_key="")
    with pytest.raises(pgbaton.InvalidArgument, match="limit_key"):
        queue.enqueue("t", limit_key="x" * 3000)


def test_a_worker_writes_the_limits_its_app_declares_when_it_starts(
    queue: pgbaton.Queue, dsn, schema
):
    """Code wins at worker start for the limits it names: a limit changed at run time is
    set back by the next worker of the App; a limit the code does not name stays."""
    from pgbaton.testing import WorkerThread

    queue.set_concurrency("emails", 50)
    queue.set_key_concurrency("emails", 2)
    app = pgbaton.App(dsn, schema=schema)
    app.limit("emails", concurrency=3, rate="10/s")
    with WorkerThread(app):
        settings = _settings(queue, "emails")
    assert (settings.concurrency, settings.rate, settings.key_concurrency) == (
        3, Rate(10, 1.0), 2)


def _wait_until_starts_are_older_than(db, seconds: float) -> None:
    """Until the database's clock is `seconds` past the queue's latest start."""
    deadline = time.monotonic() + seconds + 10.0
    while True:
        [row] = db.execute(
            "SELECT clock_timestamp() - max(started_at) > make_interval(secs => %s) AS past"
            " FROM jobs WHERE queue = 'q'", (seconds,),
        ).fetchall()
        if row["past"]:
            return
        assert time.monotonic() < deadline, "the starts never aged"
        time.sleep(0.05)


def test_widening_a_rate_window_counts_the_starts_made_before(queue: pgbaton.Queue, db):
    """A queue at 3/1s started three jobs; once its window passed, a claim with nothing
    to take (which prunes the starts log) ran, and then the window was widened to 3/4s:
    the three starts still count, so nothing starts until the first of them is 4 s old,
    and the claim says so. Raising the count then gives room for the difference at
    once: the log kept every start the window holds."""
    queue.set_rate("q", "3/1s")
    queue.enqueue_many([{"task": "t", "queue": "q"}] * 3)
    assert len(queue.claim_batch("w", limit=10, queues=["q"]).claims) == 3
    _wait_until_starts_are_older_than(db, 1.0)
    assert queue.claim_batch("w", limit=10, queues=["q"]).claims == []

    queue.enqueue_many([{"task": "t", "queue": "q"}] * 10)
    queue.set_rate("q", "3/4s")
    widened = queue.claim_batch("w", limit=10, queues=["q"])
    assert widened.claims == []
    assert widened.next_slot_in is not None and 1.0 < widened.next_slot_in <= 3.0

    queue.set_rate("q", "5/4s")
    raised = queue.claim_batch("w", limit=10, queues=["q"])
    assert len(raised.claims) == 2
    [row] = db.execute(
        "SELECT count(*) AS n FROM jobs WHERE queue = 'q' AND started_at IS NOT NULL"
    ).fetchall()
    assert row["n"] == 5
