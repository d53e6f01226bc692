"""The Django migration step that brings pgbaton's schema to one pinned version."""

from __future__ import annotations

from typing import Any

import psycopg

from ...integrations.connections import psycopg_connection
from ...integrations.migrations import migrate_to
from .settings import pgbaton_settings


def migrate_schema(version: int) -> Any:
    """A RunPython step: pgbaton's migrations up to `version`, on the database of
    PGBATON["DATABASE"] only, in the Django migration's transaction."""
    from django.db import migrations

    def forward(apps: Any, schema_editor: Any) -> None:
        settings = pgbaton_settings()
        if schema_editor.connection.alias != settings.database:
            return
        conn = psycopg_connection(schema_editor.connection, psycopg.Connection)
        migrate_to(conn, settings.schema, version)

    # Not reversible: pgbaton's migrations have no way down (drop the schema by hand).
    return migrations.RunPython(forward, elidable=False)
