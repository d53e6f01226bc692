"""pgbaton's schema from a user's Alembic migrations.

An Alembic revision pins the schema version it brings pgbaton to, so that it does the
same thing whichever pgbaton is installed when it runs; a later pgbaton that adds
version 3 gets a new revision calling `upgrade(op, 3)`. The statements are pgbaton's
own migrations, run on the revision's connection inside its transaction, under the
same advisory lock as `pgbaton migrate`, so the two routes can be mixed: what a schema
already has is skipped. Offline (`alembic upgrade --sql`) the DDL is not written out;
use `pgbaton schema --sql --from N` for that route (docs/howto/frameworks.md).

    from alembic import op
    from pgbaton.integrations import alembic as pgbaton_alembic

    def upgrade() -> None:
        pgbaton_alembic.upgrade(op, 2, schema="pgbaton")
"""

from __future__ import annotations

from typing import Any

import psycopg

from .. import _sql
from ..errors import InvalidArgument
from .connections import psycopg_connection
from .migrations import check_version, migrate_to


def upgrade(op: Any, version: int, *, schema: str = "pgbaton") -> list[int]:
    """Bring `schema` to pgbaton schema `version` in the revision's transaction; returns
    the versions applied (none when it was there already)."""
    check_version(version)
    if op.get_context().as_sql:
        raise InvalidArgument(
            "pgbaton_alembic.upgrade() runs on a live connection, not in offline mode "
            "(--sql): paste the output of `pgbaton schema --sql --from N` instead"
        )
    conn = psycopg_connection(op.get_bind(), psycopg.Connection)
    return migrate_to(conn, _sql.check_schema_name(schema), version)
