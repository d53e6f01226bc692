"""The pool probe against a direct server (PostgreSQL 15 on TCP, 18 on a Unix socket):
never taken for a pool, and a Queue's shortcut (the backend key is the server process)
holds, so it opens with one round trip more and keeps preparing."""

from __future__ import annotations

import psycopg

import pgbaton
from pgbaton import _database
from pgbaton.pooling import transaction_pool_evidence


def test_a_direct_server_names_its_own_process_at_connect(server_dsn: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None and row[0] == conn.info.backend_pid
        assert _database.transaction_pool_evidence(conn, server_dsn, trust_backend_key=True) \
            is None


def test_a_queue_on_a_direct_server_keeps_preparing(queue: pgbaton.Queue) -> None:
    assert transaction_pool_evidence(queue.dsn) is None
    queue.stats()
    assert queue.transaction_pool is None and queue.prepare is True
    told = pgbaton.Queue(queue.dsn, schema=queue.schema, prepare=False)
    try:
        told.stats()
        assert told.prepare is False and told.transaction_pool is None
    finally:
        told.close()
