"""pgbaton's schema upgraded to version 28 (one trigger of a job's change of status)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a20"
down_revision = "a19"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 28, schema=os.environ["PGBATON_TEST_SCHEMA"])
