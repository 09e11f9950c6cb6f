"""Search finds the words of tool calls: every message's function names and arguments.

Revision ID: 0007_tool_call_search
Revises: 0005_searchable_content
Create Date: 2026-12-01

Hermes Agent indexes a message's ``tool_calls`` beside its text, so a word only in a
call's arguments (a path, a command, a query) is found; here only turns without text
content imported from Hermes were. This revision adds ``messages.calls_text``, the
searchable text of a row's tool calls (each call's function name, then its arguments'
keys and values, decoded), written with the row like ``content_text``
(``hermes_repo.codec.content.calls_text``; the rule is frozen here to fill the rows
stored before it). The indexed projection becomes the text content (or the multimodal
text), a space, then ``calls_text``. The importer's earlier copy of a call's text in
``content_text`` (turns without content) moves to ``calls_text``.

Both dialects rebuild what reads the projection, from the canonical rows:

* SQLite: the two FTS5 indexes, their views and triggers (``'rebuild'``), and the
  partial indexes of the rows longer than each cap; an ``fts_stale`` marker is cleared,
  as the new index is current.
* PostgreSQL: the generated ``search_vector`` (its column rewrites ``messages`` once),
  its GIN index, the ``pg_trgm`` index and the long-row index. The text search
  configuration and the extensions stay.

The DDL is frozen here as literal text; a test proves it equals what
``hermes_repo.schema.fts`` and ``hermes_repo.schema.pg_search`` hold at run time. The
downgrade restores revision 0005's definitions, with a call's text back in
``content_text`` for turns without content (as the importer wrote it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import context, op

revision: str = "0007_tool_call_search"
down_revision: str | Sequence[str] | None = "0006_langgraph_checkpoints"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 2000
INDEX_NAMES = ("messages_fts", "messages_fts_trigram")

# SQLite: the indexes this revision creates (views and tables; triggers after the rebuild).
FTS_TABLES = (
    "CREATE VIEW messages_fts_src AS SELECT m.id AS id, substr(CASE WHEN m.calls_text IS NULL THEN coalesce(m.content, m.content_text) ELSE coalesce(coalesce(m.content, m.content_text) || ' ' || m.calls_text, m.calls_text) END, 1, 1048576) AS content, m.tool_name AS tool_name FROM messages AS m",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, content='messages_fts_src', content_rowid='id', tokenize=\"unicode61 remove_diacritics 2\")",
    "CREATE VIEW messages_fts_trigram_src AS SELECT m.id AS id, substr(CASE WHEN m.calls_text IS NULL THEN coalesce(m.content, m.content_text) ELSE coalesce(coalesce(m.content, m.content_text) || ' ' || m.calls_text, m.calls_text) END, 1, 131072) AS content FROM messages AS m WHERE (m.role <> 'tool' OR (length(CAST(substr(CASE WHEN m.calls_text IS NULL THEN coalesce(m.content, m.content_text) ELSE coalesce(coalesce(m.content, m.content_text) || ' ' || m.calls_text, m.calls_text) END, 1, 131072) AS BLOB)) <> length(substr(CASE WHEN m.calls_text IS NULL THEN coalesce(m.content, m.content_text) ELSE coalesce(coalesce(m.content, m.content_text) || ' ' || m.calls_text, m.calls_text) END, 1, 131072)) AND substr(CASE WHEN m.calls_text IS NULL THEN coalesce(m.content, m.content_text) ELSE coalesce(coalesce(m.content, m.content_text) || ' ' || m.calls_text, m.calls_text) END, 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*'))",
    "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, content='messages_fts_trigram_src', content_rowid='id', tokenize=\"trigram\")",
)

FTS_TRIGGERS = (
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts(rowid, content, tool_name) SELECT new.id, substr(CASE WHEN new.calls_text IS NULL THEN coalesce(new.content, new.content_text) ELSE coalesce(coalesce(new.content, new.content_text) || ' ' || new.calls_text, new.calls_text) END, 1, 1048576), new.tool_name; END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, content_text, calls_text, tool_name ON messages BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name) SELECT 'delete', old.id, substr(CASE WHEN old.calls_text IS NULL THEN coalesce(old.content, old.content_text) ELSE coalesce(coalesce(old.content, old.content_text) || ' ' || old.calls_text, old.calls_text) END, 1, 1048576), old.tool_name; INSERT INTO messages_fts(rowid, content, tool_name) SELECT new.id, substr(CASE WHEN new.calls_text IS NULL THEN coalesce(new.content, new.content_text) ELSE coalesce(coalesce(new.content, new.content_text) || ' ' || new.calls_text, new.calls_text) END, 1, 1048576), new.tool_name; END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name) SELECT 'delete', old.id, substr(CASE WHEN old.calls_text IS NULL THEN coalesce(old.content, old.content_text) ELSE coalesce(coalesce(old.content, old.content_text) || ' ' || old.calls_text, old.calls_text) END, 1, 1048576), old.tool_name; END",
    "CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts_trigram(rowid, content) SELECT new.id, substr(CASE WHEN new.calls_text IS NULL THEN coalesce(new.content, new.content_text) ELSE coalesce(coalesce(new.content, new.content_text) || ' ' || new.calls_text, new.calls_text) END, 1, 131072) WHERE (new.role <> 'tool' OR (length(CAST(substr(CASE WHEN new.calls_text IS NULL THEN coalesce(new.content, new.content_text) ELSE coalesce(coalesce(new.content, new.content_text) || ' ' || new.calls_text, new.calls_text) END, 1, 131072) AS BLOB)) <> length(substr(CASE WHEN new.calls_text IS NULL THEN coalesce(new.content, new.content_text) ELSE coalesce(coalesce(new.content, new.content_text) || ' ' || new.calls_text, new.calls_text) END, 1, 131072)) AND substr(CASE WHEN new.calls_text IS NULL THEN coalesce(new.content, new.content_text) ELSE coalesce(coalesce(new.content, new.content_text) || ' ' || new.calls_text, new.calls_text) END, 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*')); END",
    "CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, content_text, calls_text, role ON messages BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) SELECT 'delete', old.id, substr(CASE WHEN old.calls_text IS NULL THEN coalesce(old.content, old.content_text) ELSE coalesce(coalesce(old.content, old.content_text) || ' ' || old.calls_text, old.calls_text) END, 1, 131072) WHERE (old.role <> 'tool' OR (length(CAST(substr(CASE WHEN old.calls_text IS NULL THEN coalesce(old.content, old.content_text) ELSE coalesce(coalesce(old.content, old.content_text) || ' ' || old.calls_text, old.calls_text) END, 1, 131072) AS BLOB)) <> length(substr(CASE WHEN old.calls_text IS NULL THEN coalesce(old.content, old.content_text) ELSE coalesce(coalesce(old.content, old.content_text) || ' ' || old.calls_text, old.calls_text) END, 1, 131072)) AND substr(CASE WHEN old.calls_text IS NULL THEN coalesce(old.content, old.content_text) ELSE coalesce(coalesce(old.content, old.content_text) || ' ' || old.calls_text, old.calls_text) END, 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*')); INSERT INTO messages_fts_trigram(rowid, content) SELECT new.id, substr(CASE WHEN new.calls_text IS NULL THEN coalesce(new.content, new.content_text) ELSE coalesce(coalesce(new.content, new.content_text) || ' ' || new.calls_text, new.calls_text) END, 1, 131072) WHERE (new.role <> 'tool' OR (length(CAST(substr(CASE WHEN new.calls_text IS NULL THEN coalesce(new.content, new.content_text) ELSE coalesce(coalesce(new.content, new.content_text) || ' ' || new.calls_text, new.calls_text) END, 1, 131072) AS BLOB)) <> length(substr(CASE WHEN new.calls_text IS NULL THEN coalesce(new.content, new.content_text) ELSE coalesce(coalesce(new.content, new.content_text) || ' ' || new.calls_text, new.calls_text) END, 1, 131072)) AND substr(CASE WHEN new.calls_text IS NULL THEN coalesce(new.content, new.content_text) ELSE coalesce(coalesce(new.content, new.content_text) || ' ' || new.calls_text, new.calls_text) END, 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*')); END",
    "CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) SELECT 'delete', old.id, substr(CASE WHEN old.calls_text IS NULL THEN coalesce(old.content, old.content_text) ELSE coalesce(coalesce(old.content, old.content_text) || ' ' || old.calls_text, old.calls_text) END, 1, 131072) WHERE (old.role <> 'tool' OR (length(CAST(substr(CASE WHEN old.calls_text IS NULL THEN coalesce(old.content, old.content_text) ELSE coalesce(coalesce(old.content, old.content_text) || ' ' || old.calls_text, old.calls_text) END, 1, 131072) AS BLOB)) <> length(substr(CASE WHEN old.calls_text IS NULL THEN coalesce(old.content, old.content_text) ELSE coalesce(coalesce(old.content, old.content_text) || ' ' || old.calls_text, old.calls_text) END, 1, 131072)) AND substr(CASE WHEN old.calls_text IS NULL THEN coalesce(old.content, old.content_text) ELSE coalesce(coalesce(old.content, old.content_text) || ' ' || old.calls_text, old.calls_text) END, 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*')); END",
)

LONG_ROW_INDEXES = (
    "CREATE INDEX ix_messages_over_fts_cap ON messages (id) WHERE length(CASE WHEN calls_text IS NULL THEN coalesce(content, content_text) ELSE coalesce(coalesce(content, content_text) || ' ' || calls_text, calls_text) END) > 1048576",
    "CREATE INDEX ix_messages_over_fts_trigram_cap ON messages (id) WHERE length(CASE WHEN calls_text IS NULL THEN coalesce(content, content_text) ELSE coalesce(coalesce(content, content_text) || ' ' || calls_text, calls_text) END) > 131072",
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

# Revision 0005's SQLite objects (made by 0002), re-created by the downgrade.
FTS_TABLES_0005 = (
    "CREATE VIEW messages_fts_src AS SELECT m.id AS id, substr(coalesce(m.content, m.content_text), 1, 1048576) AS content, m.tool_name AS tool_name FROM messages AS m",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, content='messages_fts_src', content_rowid='id', tokenize=\"unicode61 remove_diacritics 2\")",
    "CREATE VIEW messages_fts_trigram_src AS SELECT m.id AS id, substr(coalesce(m.content, m.content_text), 1, 131072) AS content FROM messages AS m WHERE (m.role <> 'tool' OR substr(coalesce(m.content, m.content_text), 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*')",
    "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, content='messages_fts_trigram_src', content_rowid='id', tokenize=\"trigram\")",
)

FTS_TRIGGERS_0005 = (
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts(rowid, content, tool_name) SELECT new.id, substr(coalesce(new.content, new.content_text), 1, 1048576), new.tool_name; END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, content_text, tool_name ON messages BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name) SELECT 'delete', old.id, substr(coalesce(old.content, old.content_text), 1, 1048576), old.tool_name; INSERT INTO messages_fts(rowid, content, tool_name) SELECT new.id, substr(coalesce(new.content, new.content_text), 1, 1048576), new.tool_name; END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name) SELECT 'delete', old.id, substr(coalesce(old.content, old.content_text), 1, 1048576), old.tool_name; END",
    "CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts_trigram(rowid, content) SELECT new.id, substr(coalesce(new.content, new.content_text), 1, 131072) WHERE (new.role <> 'tool' OR substr(coalesce(new.content, new.content_text), 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*'); END",
    "CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, content_text, role ON messages BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) SELECT 'delete', old.id, substr(coalesce(old.content, old.content_text), 1, 131072) WHERE (old.role <> 'tool' OR substr(coalesce(old.content, old.content_text), 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*'); INSERT INTO messages_fts_trigram(rowid, content) SELECT new.id, substr(coalesce(new.content, new.content_text), 1, 131072) WHERE (new.role <> 'tool' OR substr(coalesce(new.content, new.content_text), 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*'); END",
    "CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) SELECT 'delete', old.id, substr(coalesce(old.content, old.content_text), 1, 131072) WHERE (old.role <> 'tool' OR substr(coalesce(old.content, old.content_text), 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*'); END",
)

LONG_ROW_INDEXES_0005 = (
    "CREATE INDEX ix_messages_over_fts_cap ON messages (id) WHERE length(coalesce(content, content_text)) > 1048576",
    "CREATE INDEX ix_messages_over_fts_trigram_cap ON messages (id) WHERE length(coalesce(content, content_text)) > 131072",
)

EXTENSIONS = (
    "pg_trgm",
    "unaccent",
)

EXTENSION_SCHEMA_SQL = "SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = :name"

# PostgreSQL: what reads the projection (EXT_SCHEMA(name): the schema of extension name).
PG_CREATE = (
    "ALTER TABLE messages ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (to_tsvector('hermes_search'::regconfig, translate(left(CASE WHEN calls_text IS NULL THEN coalesce(content, content_text) ELSE coalesce(coalesce(content, content_text) || ' ' || calls_text, calls_text) END, 131072), '!\"#$%&''()*+,-./:;<=>?@[\\]^_`{|}~', '                                ')) || to_tsvector('hermes_search'::regconfig, translate(coalesce(tool_name, ''), '!\"#$%&''()*+,-./:;<=>?@[\\]^_`{|}~', '                                '))) STORED",
    "CREATE INDEX ix_messages_search_vector ON messages USING gin (search_vector)",
    "CREATE INDEX ix_messages_search_trgm ON messages USING gin ((left(CASE WHEN calls_text IS NULL THEN coalesce(content, content_text) ELSE coalesce(coalesce(content, content_text) || ' ' || calls_text, calls_text) END, 131072)) EXT_SCHEMA(pg_trgm).gin_trgm_ops) WHERE (role <> 'tool' OR left(CASE WHEN calls_text IS NULL THEN coalesce(content, content_text) ELSE coalesce(coalesce(content, content_text) || ' ' || calls_text, calls_text) END, 131072) ~ '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]')",
    "CREATE INDEX ix_messages_over_search_cap ON messages (id) WHERE length(CASE WHEN calls_text IS NULL THEN coalesce(content, content_text) ELSE coalesce(coalesce(content, content_text) || ' ' || calls_text, calls_text) END) > 131072",
)

PG_DROP = (
    "DROP INDEX IF EXISTS ix_messages_over_search_cap",
    "DROP INDEX IF EXISTS ix_messages_search_trgm",
    "DROP INDEX IF EXISTS ix_messages_search_vector",
    "ALTER TABLE messages DROP COLUMN IF EXISTS search_vector",
)

# Revision 0005's (made by 0004), re-created by the downgrade.
PG_CREATE_0005 = (
    "ALTER TABLE messages ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (to_tsvector('hermes_search'::regconfig, translate(left(coalesce(content, content_text), 131072), '!\"#$%&''()*+,-./:;<=>?@[\\]^_`{|}~', '                                ')) || to_tsvector('hermes_search'::regconfig, translate(coalesce(tool_name, ''), '!\"#$%&''()*+,-./:;<=>?@[\\]^_`{|}~', '                                '))) STORED",
    "CREATE INDEX ix_messages_search_vector ON messages USING gin (search_vector)",
    "CREATE INDEX ix_messages_search_trgm ON messages USING gin ((left(coalesce(content, content_text), 131072)) EXT_SCHEMA(pg_trgm).gin_trgm_ops) WHERE (role <> 'tool' OR left(coalesce(content, content_text), 131072) ~ '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]')",
    "CREATE INDEX ix_messages_over_search_cap ON messages (id) WHERE length(coalesce(content, content_text)) > 131072",
)


# -- the rows -------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def _leaves(value: Any, out: list[str]) -> None:
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int | float):
            out.append(repr(node))
        elif isinstance(node, list):
            stack.extend(reversed(node))
        elif isinstance(node, Mapping):
            items: list[Any] = []
            for k, v in node.items():
                items += [str(k), v]
            stack.extend(reversed(items))


def _calls_text_0007(tool_calls: Any) -> str | None:
    if not isinstance(tool_calls, list):
        return None
    texts: list[str] = []
    for call in tool_calls:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        if not isinstance(function, Mapping):
            function = call
        name = function.get("name")
        if isinstance(name, str) and name:
            texts.append(name)
        arguments = function.get("arguments", function.get("input"))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                texts.append(arguments)
                continue
        _leaves(arguments, texts)
    text = " ".join(t for t in texts if t)
    if not text:
        return None
    if not text.isascii():
        text = _SURROGATE.sub("\ufffd", text)
    return text.replace("\x00", "\ufffd")


_messages = sa.table(
    "messages",
    sa.column("id", sa.Integer),
    sa.column("content", sa.Text),
    sa.column("content_parts", sa.Text),
    sa.column("content_text", sa.Text),
    sa.column("tool_calls", sa.Text),
    sa.column("calls_text", sa.Text),
)


def _fill_calls_text() -> None:
    """``calls_text`` of every row with tool calls, in batches by id; the importer's copy
    of it in ``content_text`` (a turn without content) is cleared, or the row's words
    would be indexed twice."""
    if context.is_offline_mode():
        return
    bind = op.get_bind()
    m = _messages.c
    select = (
        sa.select(m.id, m.tool_calls)
        .where(m.tool_calls.is_not(None), m.id > sa.bindparam("after"))
        .order_by(m.id)
        .limit(BATCH)
    )
    update = (
        sa.update(_messages)
        .where(m.id == sa.bindparam("row_id"))
        .values(calls_text=sa.bindparam("calls"))
    )
    after = -1
    while True:
        rows = bind.execute(select, {"after": after}).all()
        if not rows:
            break
        after = rows[-1][0]
        changed = []
        for row_id, calls in rows:
            try:
                value = json.loads(calls)
            except (ValueError, TypeError, RecursionError):
                continue  # not JSON text this store wrote: nothing to search in it
            text = _calls_text_0007(value)
            if text is not None:
                changed.append({"row_id": row_id, "calls": text})
        if changed:
            bind.execute(update, changed)
    bind.execute(
        sa.update(_messages)
        .where(
            m.content.is_(None),
            m.content_parts.is_(None),
            m.calls_text.is_not(None),
        )
        .values(content_text=None)
    )


def _restore_content_text() -> None:
    """Revision 0005's rule: a turn without content is found by its calls' text in
    ``content_text``."""
    if context.is_offline_mode():
        return
    m = _messages.c
    op.get_bind().execute(
        sa.update(_messages)
        .where(m.content.is_(None), m.content_parts.is_(None), m.calls_text.is_not(None))
        .values(content_text=m.calls_text)
    )


# -- SQLite ---------------------------------------------------------------------------


def _reset_shadow_tables() -> None:
    """Make each existing index constructible, so DROP TABLE works on a damaged one.

    A damaged structure record or config version makes FTS5's constructor fail, and
    with it DROP TABLE. The data is derived and rebuilt below.
    """
    if context.is_offline_mode():
        return
    present = {
        r[0]
        for r in op.get_bind().execute(
            sa.text("SELECT name FROM sqlite_master WHERE type = 'table'")
        )
    }
    for name in INDEX_NAMES:
        shadows = [f"{name}_{s}" for s in ("data", "idx", "docsize", "config")]
        if not set(shadows) <= present:
            continue
        data, idx, docsize, config = shadows
        op.execute(f"INSERT OR REPLACE INTO {config} (k, v) VALUES ('version', 4)")
        op.execute(f"DELETE FROM {data}")
        op.execute(f"DELETE FROM {idx}")
        op.execute(f"DELETE FROM {docsize}")
        op.execute(f"INSERT INTO {data} (id, block) VALUES (1, x''), (10, x'00000000000000')")


def _drop_sqlite(long_rows: Sequence[str]) -> None:
    # One statement per op.execute: executescript would commit first and break the
    # migration's single transaction.
    if context.is_offline_mode():
        for statement in FTS_DROP:
            op.execute(statement)
    else:
        bind = op.get_bind()
        try:
            with bind.begin_nested():  # a savepoint: a failed DROP leaves nothing behind
                for statement in FTS_DROP:
                    bind.execute(sa.text(statement))
        except sa.exc.DBAPIError:
            # A damaged index cannot be dropped: made constructible first. Only then, as
            # the reset would break an index holding this transaction's pending writes
            # (an earlier revision of the same upgrade re-indexed rows).
            _reset_shadow_tables()
            for statement in FTS_DROP:
                op.execute(statement)
    for statement in long_rows:
        op.execute("DROP INDEX IF EXISTS " + statement.split()[2])


def _create_sqlite(
    tables: Sequence[str], triggers: Sequence[str], long_rows: Sequence[str]
) -> None:
    # Triggers come after the rebuild, as at run time.
    for statement in tables:
        op.execute(statement)
    for name in INDEX_NAMES:
        op.execute(f"INSERT INTO {name}({name}) VALUES ('rebuild')")
    for statement in triggers:
        op.execute(statement)
    for statement in long_rows:
        op.execute(statement)
    op.execute("DELETE FROM state_meta WHERE key = 'fts_stale'")


# -- PostgreSQL -----------------------------------------------------------------------


def _extension_schemas() -> dict[str, str]:
    """Each extension's (quoted) schema: revision 0004 installed them."""
    if context.is_offline_mode():  # no database to ask: the default schema
        return dict.fromkeys(EXTENSIONS, "public")
    bind = op.get_bind()
    return {
        name: str(bind.execute(sa.text(EXTENSION_SCHEMA_SQL), {"name": name}).scalar_one())
        for name in EXTENSIONS
    }


def _create_pg(statements: Sequence[str]) -> None:
    schemas = _extension_schemas()
    for statement in statements:
        for name, schema in schemas.items():
            statement = statement.replace(f"EXT_SCHEMA({name})", schema)
        op.execute(statement)


def _dialect() -> str:
    return str(context.get_context().dialect.name)


def upgrade() -> None:
    if _dialect() == "sqlite":
        _drop_sqlite(LONG_ROW_INDEXES_0005)
    else:
        for statement in PG_DROP:
            op.execute(statement)
    op.add_column("messages", sa.Column("calls_text", sa.Text()))
    _fill_calls_text()
    if _dialect() == "sqlite":
        _create_sqlite(FTS_TABLES, FTS_TRIGGERS, LONG_ROW_INDEXES)
    else:
        _create_pg(PG_CREATE)


def downgrade() -> None:
    if _dialect() == "sqlite":
        _drop_sqlite(LONG_ROW_INDEXES)
    else:
        for statement in PG_DROP:
            op.execute(statement)
    _restore_content_text()
    op.drop_column("messages", "calls_text")
    if _dialect() == "sqlite":
        _create_sqlite(FTS_TABLES_0005, FTS_TRIGGERS_0005, LONG_ROW_INDEXES_0005)
    else:
        _create_pg(PG_CREATE_0005)
