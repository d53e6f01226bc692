"""pgbaton's schema upgraded to version 20 (waiting_event only while a job waits)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a12"
down_revision = "a11"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 20, schema=os.environ["PGBATON_TEST_SCHEMA"])
