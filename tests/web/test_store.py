"""The overview's last hour: finished minutes are read once, the current one each time."""

from __future__ import annotations

import psycopg
from psycopg.rows import DictRow

import pgbaton
from pgbaton.web.store import Store

FINISHED = """
INSERT INTO jobs (queue, task, status, attempts, run_at, created_at, started_at, finished_at)
SELECT %(queue)s, 't', %(status)s, 1, t - make_interval(secs => %(wait)s + 1), t,
       t - interval '1 second', t
FROM generate_series(1, %(count)s), LATERAL (
    SELECT date_trunc('minute', now()) - make_interval(mins => %(ago)s) + interval '1 second'
    AS t) AS at
"""


def finish(db: psycopg.Connection[DictRow], count: int, ago: int, *, status: str = "done",
           queue: str = "q", wait: float = 1.0) -> None:
    """count jobs of `queue` finished `ago` minutes ago, after waiting `wait` seconds."""
    db.execute(FINISHED, {"count": count, "ago": ago, "status": status, "queue": queue,
                          "wait": wait})


def by_minute(rows: list[dict[str, object]]) -> list[tuple[object, object, object]]:
    return [(r["minute"], r["done"], r["failed"]) for r in rows]


async def test_last_hour_reads_past_minutes_once(
        dsn: str, schema: str, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """The first read equals the whole hour as SQL computes it; later reads ask only for
    the minutes since the newest one kept, so a row written into a past minute
    afterwards (which pgbaton never does: finished_at is the time of the write) is not
    read again, while the current minute is."""
    finish(db, 3, ago=30)
    finish(db, 2, ago=5, status="failed")
    finish(db, 4, ago=0)
    finish(db, 1, ago=90)  # older than the hour: never shown
    store = Store(dsn, schema)
    try:
        first = await store.last_hour()
        whole = await store.fetch("dashboard_minutes", {"since": None})
        assert by_minute(first) == by_minute(whole)
        assert [(r["done"], r["failed"]) for r in first] == [(3, 0), (0, 2), (4, 0)]
        finish(db, 5, ago=0)
        finish(db, 7, ago=30)
        second = await store.last_hour()
        assert [(r["done"], r["failed"]) for r in second] == [(3, 0), (0, 2), (9, 0)]
    finally:
        await store.close()


async def test_a_store_opened_while_the_database_is_away_recovers_when_it_returns(
        dsn: str, schema: str, queue: pgbaton.Queue, monkeypatch) -> None:
    """A dashboard started before its database (or while it restarts) answers 503 while
    no connection comes, then serves again once the database answers: its pool is
    opened once and keeps reconnecting, never left opened-but-unusable."""
    import socket

    import pytest
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from pgbaton.web import store as store_module
    from tests.proxy import PausableProxy

    monkeypatch.setattr(store_module, "CONNECTION_WAIT_SECONDS", 1.0)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    target = conninfo_to_dict(dsn)
    away = make_conninfo(dsn, host="127.0.0.1", port=str(port))
    store = Store(away, schema)
    try:
        for _ in range(2):  # the second try meets the same pool, not a closed one
            with pytest.raises(psycopg.OperationalError):
                await store.ping()
        proxy = PausableProxy(str(target.get("host") or "/tmp"),
                              int(target.get("port") or 5432), port=port)
        try:
            for _ in range(100):
                try:
                    assert await store.ping()
                    break
                except psycopg.OperationalError:
                    continue  # the pool's reconnect backoff; each try waits 1 s
            else:
                raise AssertionError("the store never reconnected")
        finally:
            await store.close()
            proxy.close()
    finally:
        await store.close()
