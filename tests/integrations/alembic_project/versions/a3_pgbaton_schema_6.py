"""pgbaton's schema upgraded to version 6, the next release's, in a revision of its own."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a3"
down_revision = "a2"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 6, schema=os.environ["PGBATON_TEST_SCHEMA"])
