"""LangGraph's checkpoints, channel values and pending writes, in tables of their own.

Revision ID: 0006_langgraph_checkpoints
Revises: 0005_searchable_content
Create Date: 2026-12-01

``hermes_repo.integrations.langgraph.HermesSaver`` keeps a LangGraph thread as a session
of source ``langgraph``: its messages are message rows like any other conversation's,
and the framework's own state (checkpoints, the channel values they name, the writes of
their tasks) goes to these three tables, keyed by the session. New empty tables: no row
of an existing store is touched, on SQLite or PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_langgraph_checkpoints"
down_revision: str | Sequence[str] | None = "0005_searchable_content"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _session_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["session_id"], ["sessions.id"], name=f"fk_{table}_session_id_sessions"
    )


def upgrade() -> None:
    op.create_table(
        "langgraph_checkpoints",
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("checkpoint_ns", sa.String(), server_default=sa.text("''"), nullable=False),
        sa.Column("checkpoint_id", sa.String(), nullable=False),
        sa.Column("parent_checkpoint_id", sa.String(), nullable=True),
        sa.Column("run_id", sa.String(), nullable=True),
        sa.Column("checkpoint_type", sa.String(), nullable=False),
        sa.Column("checkpoint", sa.LargeBinary(), nullable=False),
        sa.Column("metadata_type", sa.String(), nullable=False),
        sa.Column("metadata", sa.LargeBinary(), nullable=False),
        _session_fk("langgraph_checkpoints"),
        sa.PrimaryKeyConstraint(
            "session_id", "checkpoint_ns", "checkpoint_id", name="pk_langgraph_checkpoints"
        ),
    )
    op.create_index("ix_langgraph_checkpoints_run_id", "langgraph_checkpoints", ["run_id"])
    op.create_table(
        "langgraph_blobs",
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("checkpoint_ns", sa.String(), server_default=sa.text("''"), nullable=False),
        sa.Column("channel", sa.String(), nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.Column("type", sa.String(), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=True),
        _session_fk("langgraph_blobs"),
        sa.PrimaryKeyConstraint(
            "session_id", "checkpoint_ns", "channel", "version", name="pk_langgraph_blobs"
        ),
    )
    op.create_table(
        "langgraph_writes",
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("checkpoint_ns", sa.String(), server_default=sa.text("''"), nullable=False),
        sa.Column("checkpoint_id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(), nullable=False),
        sa.Column("type", sa.String(), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        sa.Column("task_path", sa.String(), server_default=sa.text("''"), nullable=False),
        _session_fk("langgraph_writes"),
        sa.PrimaryKeyConstraint(
            "session_id",
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "idx",
            name="pk_langgraph_writes",
        ),
    )


def downgrade() -> None:
    op.drop_table("langgraph_writes")
    op.drop_table("langgraph_blobs")
    op.drop_index("ix_langgraph_checkpoints_run_id", table_name="langgraph_checkpoints")
    op.drop_table("langgraph_checkpoints")
