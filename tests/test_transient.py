"""Which database errors mean a lost connection, or are worth retrying: a message the
server refused at level ERROR is neither, class 08 or not; a session it ended is both."""

from __future__ import annotations

import psycopg
import pytest

from pgbaton._transient import is_connection_loss, is_prepared_statement_mixup, is_transient


def test_a_bind_to_a_prepared_statement_of_another_shape_is_not_a_lost_connection(
    server_dsn: str,
) -> None:
    """What a client that prepares through a transaction pool meets: 08P01 at level
    ERROR, after which the session answers as before."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute("PREPARE _pg3_0 AS SELECT $1::int")
        result = conn.pgconn.exec_prepared(b"_pg3_0", [])  # a Bind with no parameter
        error = psycopg.errors.error_from_result(result)
        assert isinstance(error, psycopg.errors.ProtocolViolation), error
        assert "bind message supplies 0 parameters" in str(error)
        assert not is_connection_loss(error)
        assert not is_transient(error)
        assert is_prepared_statement_mixup(error)
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_missing_prepared_statement_is_a_mixup_not_a_loss(server_dsn: str) -> None:
    with (
        psycopg.connect(server_dsn, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InvalidSqlStatementName) as caught,
    ):
        conn.execute("EXECUTE _pg3_9")
    assert is_prepared_statement_mixup(caught.value)
    assert not is_connection_loss(caught.value) and not is_transient(caught.value)


def test_a_session_the_server_ends_is_a_lost_connection(server_dsn: str) -> None:
    with (
        psycopg.connect(server_dsn, autocommit=True) as victim,
        psycopg.connect(server_dsn, autocommit=True) as other,
    ):
        other.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError) as caught:
            victim.execute("SELECT 1")
    assert is_connection_loss(caught.value) and is_transient(caught.value)
    assert not is_prepared_statement_mixup(caught.value)
