"""pgbaton's schema upgraded to version 10 (the release cascade, per-key order, rate
windows)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a6"
down_revision = "a5"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 10, schema=os.environ["PGBATON_TEST_SCHEMA"])
