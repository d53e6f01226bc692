"""pgbaton's schema upgraded to version 19 (each run's own log lines)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a11"
down_revision = "a10"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 19, schema=os.environ["PGBATON_TEST_SCHEMA"])
