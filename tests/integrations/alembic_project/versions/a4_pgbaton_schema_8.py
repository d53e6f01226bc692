"""pgbaton's schema upgraded to version 8 (7: the flow claim; 8: the history table)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a4"
down_revision = "a3"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 8, schema=os.environ["PGBATON_TEST_SCHEMA"])
