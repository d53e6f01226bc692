"""pgbaton's schema upgraded to version 13 (the SQL API: enqueue, enqueue_many)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a9"
down_revision = "a8"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 13, schema=os.environ["PGBATON_TEST_SCHEMA"])
