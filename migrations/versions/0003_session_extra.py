"""Sessions keep what has no column: a nullable JSON ``extra``, like messages.

Revision ID: 0003_session_extra
Revises: 0002_search_caps
Create Date: 2026-11-30

An imported Hermes Agent store carries dozens of session columns this store has no
column for (billing, workspace, routing, model_config...). They are kept, not dropped,
as one JSON object per session, so an export can give them back. ``ADD COLUMN`` of a
nullable column without a default is a schema-only change in SQLite: no row is
rewritten, however large the store.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_session_extra"
down_revision: str | Sequence[str] | None = "0002_search_caps"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("extra", sa.Text(), nullable=True))


def downgrade() -> None:
    # DROP COLUMN (SQLite 3.35+) needs no table copy for a column nothing indexes.
    op.drop_column("sessions", "extra")
