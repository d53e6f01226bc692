"""pgbaton's schema upgraded to version 25 (an event by key read by index)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a17"
down_revision = "a16"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 25, schema=os.environ["PGBATON_TEST_SCHEMA"])
