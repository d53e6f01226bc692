"""pgbaton's schema at version 1, as a user's first revision would have created it."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a1"
down_revision = None


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 1, schema=os.environ["PGBATON_TEST_SCHEMA"])


def downgrade() -> None:
    op.execute(f'DROP SCHEMA "{os.environ["PGBATON_TEST_SCHEMA"]}" CASCADE')
