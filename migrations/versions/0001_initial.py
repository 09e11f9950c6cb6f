"""Initial schema: sessions, messages, state_meta and the two full-text indexes.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29

Why each table exists:

* ``sessions``: one row per conversation; counters mirror its active messages so
  listings need no aggregate; ``parent_session_id`` chains compressed or forked sessions.
* ``messages``: the transcript in replay order (``id``; AUTOINCREMENT so an id is never
  reused, as it is the full-text rowid). ``uid`` is the client's idempotency key, unique
  per session, so spool replay is exactly-once. ``active = 0`` rows are archived audit
  rows, never deleted.
* ``state_meta``: durable markers such as ``fts_stale``.
* ``messages_fts`` (words) and ``messages_fts_trigram`` (substrings, CJK): derived,
  external-content FTS5 indexes over projection views, kept in sync by triggers. The DDL
  below is frozen here as literal text; a test proves it equals what
  ``hermes_repo.schema.fts`` re-creates at run time.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# 64-bit on both: SQLite's INTEGER already is; PostgreSQL's INTEGER is 32-bit.
INT64 = sa.Integer().with_variant(sa.BigInteger(), "postgresql")

FTS_CREATE = (
    "CREATE VIEW messages_fts_src AS SELECT m.id AS id, coalesce(m.content, m.content_text) AS content, m.tool_name AS tool_name FROM messages AS m",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, content='messages_fts_src', content_rowid='id', tokenize=\"unicode61 remove_diacritics 2\")",
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts(rowid, content, tool_name) SELECT new.id, coalesce(new.content, new.content_text), new.tool_name; END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, content_text, tool_name ON messages BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name) SELECT 'delete', old.id, coalesce(old.content, old.content_text), old.tool_name; INSERT INTO messages_fts(rowid, content, tool_name) SELECT new.id, coalesce(new.content, new.content_text), new.tool_name; END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name) SELECT 'delete', old.id, coalesce(old.content, old.content_text), old.tool_name; END",
    "CREATE VIEW messages_fts_trigram_src AS SELECT m.id AS id, coalesce(m.content, m.content_text) AS content FROM messages AS m WHERE m.role <> 'tool'",
    "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, content='messages_fts_trigram_src', content_rowid='id', tokenize=\"trigram\")",
    "CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts_trigram(rowid, content) SELECT new.id, coalesce(new.content, new.content_text) WHERE new.role <> 'tool'; END",
    "CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, content_text, role ON messages BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) SELECT 'delete', old.id, coalesce(old.content, old.content_text) WHERE old.role <> 'tool'; INSERT INTO messages_fts_trigram(rowid, content) SELECT new.id, coalesce(new.content, new.content_text) WHERE new.role <> 'tool'; END",
    "CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) SELECT 'delete', old.id, coalesce(old.content, old.content_text) WHERE old.role <> 'tool'; END",
)

FTS_DROP = (
    "DROP TRIGGER IF EXISTS messages_fts_insert",
    "DROP TRIGGER IF EXISTS messages_fts_update",
    "DROP TRIGGER IF EXISTS messages_fts_delete",
    "DROP TABLE IF EXISTS messages_fts",
    "DROP VIEW IF EXISTS messages_fts_src",
    "DROP TRIGGER IF EXISTS messages_fts_trigram_insert",
    "DROP TRIGGER IF EXISTS messages_fts_trigram_update",
    "DROP TRIGGER IF EXISTS messages_fts_trigram_delete",
    "DROP TABLE IF EXISTS messages_fts_trigram",
    "DROP VIEW IF EXISTS messages_fts_trigram_src",
)


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("source", sa.String(), server_default=sa.text("'cli'"), nullable=False),
        sa.Column("user_id", sa.String(), nullable=True),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("title", sa.String(), nullable=True),
        sa.Column("parent_session_id", sa.String(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("end_reason", sa.String(), nullable=True),
        sa.Column("message_count", INT64, server_default=sa.text("0"), nullable=False),
        sa.Column("tool_call_count", INT64, server_default=sa.text("0"), nullable=False),
        sa.Column("input_tokens", INT64, server_default=sa.text("0"), nullable=False),
        sa.Column("output_tokens", INT64, server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(
            ["parent_session_id"],
            ["sessions.id"],
            name=op.f("fk_sessions_parent_session_id_sessions"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    op.create_index(op.f("ix_sessions_started_at"), "sessions", ["started_at"])
    op.create_index(op.f("ix_sessions_parent_session_id"), "sessions", ["parent_session_id"])

    op.create_table(
        "messages",
        sa.Column("id", INT64, nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("uid", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("content_parts", sa.Text(), nullable=True),
        sa.Column("content_text", sa.Text(), nullable=True),
        sa.Column("tool_calls", sa.Text(), nullable=True),
        sa.Column("tool_call_id", sa.String(), nullable=True),
        sa.Column("tool_name", sa.String(), nullable=True),
        sa.Column("timestamp", sa.Float(), nullable=False),
        sa.Column("token_count", INT64, nullable=True),
        sa.Column("finish_reason", sa.String(), nullable=True),
        sa.Column("reasoning", sa.Text(), nullable=True),
        sa.Column("reasoning_details", sa.Text(), nullable=True),
        sa.Column("api_content", sa.Text(), nullable=True),
        sa.Column("extra", sa.Text(), nullable=True),
        sa.Column("display_only", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("active", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("archived_at", sa.Float(), nullable=True),
        sa.Column("archive_reason", sa.String(), nullable=True),
        sa.CheckConstraint(
            "role IN ('system', 'user', 'assistant', 'tool')", name=op.f("ck_messages_role")
        ),
        sa.CheckConstraint("active IN (0, 1)", name=op.f("ck_messages_active")),
        sa.CheckConstraint("display_only IN (0, 1)", name=op.f("ck_messages_display_only")),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_messages_session_id_sessions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
        sa.UniqueConstraint("session_id", "uid", name=op.f("uq_messages_session_id_uid")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_messages_session_id_id"), "messages", ["session_id", "id"])
    op.create_index(
        op.f("ix_messages_session_id_active_id"), "messages", ["session_id", "active", "id"]
    )

    op.create_table(
        "state_meta",
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_state_meta")),
    )

    # FTS5 is SQLite's; PostgreSQL's search index comes with a later revision.
    if op.get_context().dialect.name != "sqlite":
        return
    # One statement per op.execute: executescript would commit first and break the
    # migration's single transaction.
    for statement in FTS_CREATE:
        op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        for statement in FTS_DROP:
            op.execute(statement)
    op.drop_table("state_meta")
    op.drop_index(op.f("ix_messages_session_id_active_id"), table_name="messages")
    op.drop_index(op.f("ix_messages_session_id_id"), table_name="messages")
    op.drop_table("messages")
    op.drop_index(op.f("ix_sessions_parent_session_id"), table_name="sessions")
    op.drop_index(op.f("ix_sessions_started_at"), table_name="sessions")
    op.drop_table("sessions")
