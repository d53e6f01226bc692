"""pgbaton's schema upgraded to version 12 (the SQL API: enqueue, enqueue_many)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a8"
down_revision = "a7"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 12, schema=os.environ["PGBATON_TEST_SCHEMA"])
