"""pgbaton's schema upgraded to version 27 (running jobs' cancels delivered)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a19"
down_revision = "a18"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 27, schema=os.environ["PGBATON_TEST_SCHEMA"])
