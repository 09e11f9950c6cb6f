"""The canonical tables: sessions, messages and state_meta.

These three tables are the store's truth. The full-text indexes (``messages_fts*``),
their shadow tables and sync triggers are *derived*: they can be dropped and rebuilt at
any time, so they stay out of this MetaData and live as raw DDL in :mod:`hermes_repo.schema.fts`.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from .roles import ROLES

__all__ = [
    "NAMING_CONVENTION",
    "ROLES",
    "AgentSession",
    "Base",
    "Message",
    "StateMeta",
    "langgraph_blobs_table",
    "langgraph_checkpoints_table",
    "langgraph_writes_table",
    "messages_table",
    "sessions_table",
    "state_meta_table",
]

# SQLite keeps unnamed constraints unnamed, and Alembic's batch mode cannot drop an
# unnamed constraint later: every constraint and index gets a predictable name.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


# SQLite's INTEGER holds 64 bits and the codec accepts any 64-bit value; PostgreSQL's
# INTEGER holds 32. Ids, token counts and counters are BIGINT there (same DDL on SQLite,
# where a BIGINT primary key would stop being the rowid).
Int64 = Integer().with_variant(BigInteger(), "postgresql")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class AgentSession(Base):
    """One conversation of an agent (a CLI run, a chat thread, a subagent...).

    ``parent_session_id`` links a session to the one it was compressed or forked from.
    The counters mirror the *active* messages so listings need no aggregate query.
    """

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    source: Mapped[str] = mapped_column(String, server_default=text("'cli'"))
    user_id: Mapped[str | None] = mapped_column(String)
    model: Mapped[str | None] = mapped_column(String)
    title: Mapped[str | None] = mapped_column(String)
    parent_session_id: Mapped[str | None] = mapped_column(
        ForeignKey("sessions.id", ondelete="SET NULL")
    )
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    end_reason: Mapped[str | None] = mapped_column(String)
    message_count: Mapped[int] = mapped_column(Int64, server_default=text("0"))
    tool_call_count: Mapped[int] = mapped_column(Int64, server_default=text("0"))
    input_tokens: Mapped[int] = mapped_column(Int64, server_default=text("0"))
    output_tokens: Mapped[int] = mapped_column(Int64, server_default=text("0"))
    # Fields with no column (e.g. everything an imported Hermes Agent session carries
    # beyond ours), as a JSON object, so nothing handed to the store is dropped.
    extra: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index(None, "started_at"),
        Index(None, "parent_session_id"),
    )


class Message(Base):
    """One message of a session, in replay order (``id``, never ``timestamp``).

    ``id`` is AUTOINCREMENT so ids are never reused: it is the full-text rowid, and an
    archived row's id must never come back as a different message. ``uid`` is the
    client's idempotency key: spool replay and recovery insert a uid at most once per
    session, even when content and timestamp repeat. ``active = 0`` marks an archived
    audit row (kept, never deleted); ``display_only`` rows are shown to people and never
    replayed to the model. ``api_content`` holds the exact payload sent to the provider
    when it differs from ``content`` (NULL: content was sent as is).
    """

    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(Int64, primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"))
    uid: Mapped[str] = mapped_column(String)
    role: Mapped[str] = mapped_column(String)
    # Text content; a list (multimodal parts) or any other JSON value goes to
    # content_parts instead, so full-text search can index only the text parts.
    content: Mapped[str | None] = mapped_column(Text)
    content_parts: Mapped[str | None] = mapped_column(Text)
    # The text parts of content_parts joined by spaces, computed when the row is written:
    # the full-text projection is then a plain column read (no JSON parsing in triggers,
    # and FTS5 cannot read a view that calls a table-valued function like json_each).
    content_text: Mapped[str | None] = mapped_column(Text)
    tool_calls: Mapped[str | None] = mapped_column(Text)  # JSON text
    # The searchable text of tool_calls (each call's function name and arguments),
    # computed when the row is written, like content_text: the index reads a plain column.
    calls_text: Mapped[str | None] = mapped_column(Text)
    tool_call_id: Mapped[str | None] = mapped_column(String)
    tool_name: Mapped[str | None] = mapped_column(String)
    timestamp: Mapped[float] = mapped_column(Float)
    token_count: Mapped[int | None] = mapped_column(Int64)
    finish_reason: Mapped[str | None] = mapped_column(String)
    reasoning: Mapped[str | None] = mapped_column(Text)
    reasoning_details: Mapped[str | None] = mapped_column(Text)  # JSON text
    api_content: Mapped[str | None] = mapped_column(Text)
    # Keys of the caller's dict that have no column, as JSON, so nothing handed to the
    # store is silently dropped.
    extra: Mapped[str | None] = mapped_column(Text)
    display_only: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    active: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    archived_at: Mapped[float | None] = mapped_column(Float)
    archive_reason: Mapped[str | None] = mapped_column(String)

    __table_args__ = (
        CheckConstraint(f"role IN ({', '.join(repr(r) for r in ROLES)})", name="role"),
        CheckConstraint("active IN (0, 1)", name="active"),
        CheckConstraint("display_only IN (0, 1)", name="display_only"),
        UniqueConstraint("session_id", "uid"),
        Index(None, "session_id", "id"),
        Index(None, "session_id", "active", "id"),
        {"sqlite_autoincrement": True},
    )


class StateMeta(Base):
    """Durable markers of the store's state, e.g. ``fts_stale`` while the index is detached."""

    __tablename__ = "state_meta"

    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[float] = mapped_column(Float)


# Core Table objects for the hot paths (append, flush, recovery use Core statements).
sessions_table = cast(Table, AgentSession.__table__)
messages_table = cast(Table, Message.__table__)
state_meta_table = cast(Table, StateMeta.__table__)


# LangGraph's checkpoints (hermes_repo.integrations.langgraph), in tables of their own: a
# thread is a session of source ``langgraph``, and these rows are its framework state,
# not its conversation (the thread's messages are ordinary display-only message rows).
# Values are the framework serializer's (type tag, bytes): BLOB on SQLite, BYTEA on
# PostgreSQL. Sessions are never deleted, so the foreign keys never block the store.
langgraph_checkpoints_table = Table(
    "langgraph_checkpoints",
    Base.metadata,
    Column("session_id", String, ForeignKey("sessions.id"), nullable=False),
    Column("checkpoint_ns", String, nullable=False, server_default=text("''")),
    Column("checkpoint_id", String, nullable=False),
    Column("parent_checkpoint_id", String),
    # metadata["run_id"], for delete_for_runs.
    Column("run_id", String),
    Column("checkpoint_type", String, nullable=False),
    Column("checkpoint", LargeBinary, nullable=False),
    Column("metadata_type", String, nullable=False),
    Column("metadata", LargeBinary, nullable=False),
    PrimaryKeyConstraint("session_id", "checkpoint_ns", "checkpoint_id"),
    Index(None, "run_id"),
)

# One channel value per (channel, version): a checkpoint names the versions it holds,
# so a value unchanged across steps is stored once.
langgraph_blobs_table = Table(
    "langgraph_blobs",
    Base.metadata,
    Column("session_id", String, ForeignKey("sessions.id"), nullable=False),
    Column("checkpoint_ns", String, nullable=False, server_default=text("''")),
    Column("channel", String, nullable=False),
    Column("version", String, nullable=False),
    Column("type", String, nullable=False),
    Column("blob", LargeBinary),
    PrimaryKeyConstraint("session_id", "checkpoint_ns", "channel", "version"),
)

# The pending writes of a checkpoint's tasks.
langgraph_writes_table = Table(
    "langgraph_writes",
    Base.metadata,
    Column("session_id", String, ForeignKey("sessions.id"), nullable=False),
    Column("checkpoint_ns", String, nullable=False, server_default=text("''")),
    Column("checkpoint_id", String, nullable=False),
    Column("task_id", String, nullable=False),
    Column("idx", Integer, nullable=False),
    Column("channel", String, nullable=False),
    Column("type", String, nullable=False),
    Column("blob", LargeBinary, nullable=False),
    Column("task_path", String, nullable=False, server_default=text("''")),
    PrimaryKeyConstraint("session_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
)
