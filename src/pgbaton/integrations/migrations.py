"""pgbaton's migrations up to a pinned version, on a connection inside someone else's
migration (an Alembic revision, a Django migration) and in its transaction.

A migration tool's step must do the same thing whichever pgbaton runs it, so it names
the version it brings the schema to; what the schema already has is skipped, under
the advisory lock that `pgbaton migrate` takes, so the routes can be mixed.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from .. import _sql
from ..errors import InvalidArgument, SchemaTooNew


def check_version(version: object) -> int:
    newest = _sql.schema_version()
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= newest:
        raise InvalidArgument(
            f"pgbaton schema version must be an integer from 1 to {newest} (the newest this "
            f"pgbaton knows), got {version!r}"
        )
    return version


def migrate_to(conn: psycopg.Connection[Any], schema: str, version: int) -> list[int]:
    """Apply pgbaton's migrations after the schema's version, up to `version`, in the
    connection's transaction; returns the versions applied."""
    check_version(version)
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
