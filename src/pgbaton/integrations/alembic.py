"""pgbaton's schema from a user's Alembic migrations.

An Alembic revision pins the schema version it brings pgbaton to, so that it does the
same thing whichever pgbaton is installed when it runs; a later pgbaton that adds
version 3 gets a new revision calling `upgrade(op, 3)`. The statements are pgbaton's
own migrations, run on the revision's connection inside its transaction, under the
same advisory lock as `pgbaton migrate`, so the two routes can be mixed: what a schema
already has is skipped. Offline (`alembic upgrade --sql`) the DDL is not written out;
use `pgbaton schema --sql --from N` for that route (docs/frameworks.md).

    from alembic import op
    from pgbaton.integrations import alembic as pgbaton_alembic

    def upgrade() -> None:
        pgbaton_alembic.upgrade(op, 2, schema="pgbaton")
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from .. import _sql
from ..errors import InvalidArgument, SchemaTooNew
from .connections import psycopg_connection


def upgrade(op: Any, version: int, *, schema: str = "pgbaton") -> list[int]:
    """Bring `schema` to pgbaton schema `version` in the revision's transaction; returns
    the versions applied (none when it was there already)."""
    newest = _sql.schema_version()
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= newest:
        raise InvalidArgument(
            f"pgbaton schema version must be an integer from 1 to {newest} (the newest this "
            f"pgbaton knows), got {version!r}"
        )
    if op.get_context().as_sql:
        raise InvalidArgument(
            "pgbaton_alembic.upgrade() runs on a live connection, not in offline mode "
            "(--sql): paste the output of `pgbaton schema --sql --from N` instead"
        )
    conn = psycopg_connection(op.get_bind(), psycopg.Connection)
    return _apply(conn, _sql.check_schema_name(schema), version)


def _apply(conn: psycopg.Connection[Any], schema: str, version: int) -> list[int]:
    sql = _sql.queries(schema)
    applied: list[int] = []
    with conn.cursor(row_factory=dict_row) as cursor:
        cursor.execute(sql["migration_lock"], {"schema": schema})
        cursor.execute(sql["schema_create"])
        cursor.execute(sql["schema_version_create"])
        cursor.execute(sql["schema_version_get"])
        row = cursor.fetchone()
        assert row is not None
        current = int(row["version"])
        if current > _sql.schema_version():
            raise SchemaTooNew(
                f"schema {schema!r} is at version {current}, newer than the version "
                f"{_sql.schema_version()} this pgbaton knows: upgrade pgbaton"
            )
        for migration in _sql.migrations()[current:version]:
            # No parameters: several statements in one string go as one simple query.
            cursor.execute(migration.in_schema(schema))
            cursor.execute(
                sql["schema_version_record"],
                {"version": migration.version, "name": migration.name},
            )
            applied.append(migration.version)
    return applied
