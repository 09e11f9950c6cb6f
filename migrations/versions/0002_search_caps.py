"""Search that never silently misses: capped index text, CJK tool rows, long-row indexes.

Revision ID: 0002_search_caps
Revises: 0001_initial
Create Date: 2026-11-30

What changes, and why:

* Each full-text index takes at most a fixed number of characters from one row (1 MiB
  characters for the word index, 128 Ki for the trigram index): indexing a 50 MB message
  held the write lock for over a minute. The views and triggers project
  ``substr(text, 1, cap)``.
* The trigram index also covers tool rows whose (capped) text holds CJK characters:
  unicode61 makes one token of a whole CJK run, so a CJK word inside tool output could
  not be found at all.
* Two partial b-tree indexes list the rows longer than each cap, so search can scan just
  those rows (LIKE) for text beyond the cap.

The indexes are derived: both are dropped, created anew from the canonical rows
(``'rebuild'``) and their triggers re-created; an ``fts_stale`` marker is cleared, as the
new index is current. The DDL is frozen here as literal text; a test proves it equals what
``hermes_repo.schema.fts`` re-creates at run time.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0002_search_caps"
down_revision: str | Sequence[str] | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX_NAMES = ("messages_fts", "messages_fts_trigram")

FTS_TABLES = (
    "CREATE VIEW messages_fts_src AS SELECT m.id AS id, substr(coalesce(m.content, m.content_text), 1, 1048576) AS content, m.tool_name AS tool_name FROM messages AS m",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, content='messages_fts_src', content_rowid='id', tokenize=\"unicode61 remove_diacritics 2\")",
    "CREATE VIEW messages_fts_trigram_src AS SELECT m.id AS id, substr(coalesce(m.content, m.content_text), 1, 131072) AS content FROM messages AS m WHERE (m.role <> 'tool' OR substr(coalesce(m.content, m.content_text), 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*')",
    "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, content='messages_fts_trigram_src', content_rowid='id', tokenize=\"trigram\")",
)

FTS_TRIGGERS = (
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts(rowid, content, tool_name) SELECT new.id, substr(coalesce(new.content, new.content_text), 1, 1048576), new.tool_name; END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, content_text, tool_name ON messages BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name) SELECT 'delete', old.id, substr(coalesce(old.content, old.content_text), 1, 1048576), old.tool_name; INSERT INTO messages_fts(rowid, content, tool_name) SELECT new.id, substr(coalesce(new.content, new.content_text), 1, 1048576), new.tool_name; END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name) SELECT 'delete', old.id, substr(coalesce(old.content, old.content_text), 1, 1048576), old.tool_name; END",
    "CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts_trigram(rowid, content) SELECT new.id, substr(coalesce(new.content, new.content_text), 1, 131072) WHERE (new.role <> 'tool' OR substr(coalesce(new.content, new.content_text), 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*'); END",
    "CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, content_text, role ON messages BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) SELECT 'delete', old.id, substr(coalesce(old.content, old.content_text), 1, 131072) WHERE (old.role <> 'tool' OR substr(coalesce(old.content, old.content_text), 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*'); INSERT INTO messages_fts_trigram(rowid, content) SELECT new.id, substr(coalesce(new.content, new.content_text), 1, 131072) WHERE (new.role <> 'tool' OR substr(coalesce(new.content, new.content_text), 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*'); END",
    "CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) SELECT 'delete', old.id, substr(coalesce(old.content, old.content_text), 1, 131072) WHERE (old.role <> 'tool' OR substr(coalesce(old.content, old.content_text), 1, 131072) GLOB '*[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]*'); END",
)

LONG_ROW_INDEXES = (
    "CREATE INDEX ix_messages_over_fts_cap ON messages (id) WHERE length(coalesce(content, content_text)) > 1048576",
    "CREATE INDEX ix_messages_over_fts_trigram_cap ON messages (id) WHERE length(coalesce(content, content_text)) > 131072",
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

# Revision 0001's objects, re-created by the downgrade.
FTS_TABLES_0001 = (
    "CREATE VIEW messages_fts_src AS SELECT m.id AS id, coalesce(m.content, m.content_text) AS content, m.tool_name AS tool_name FROM messages AS m",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, content='messages_fts_src', content_rowid='id', tokenize=\"unicode61 remove_diacritics 2\")",
    "CREATE VIEW messages_fts_trigram_src AS SELECT m.id AS id, coalesce(m.content, m.content_text) AS content FROM messages AS m WHERE m.role <> 'tool'",
    "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, content='messages_fts_trigram_src', content_rowid='id', tokenize=\"trigram\")",
)

FTS_TRIGGERS_0001 = (
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts(rowid, content, tool_name) SELECT new.id, coalesce(new.content, new.content_text), new.tool_name; END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, content_text, tool_name ON messages BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name) SELECT 'delete', old.id, coalesce(old.content, old.content_text), old.tool_name; INSERT INTO messages_fts(rowid, content, tool_name) SELECT new.id, coalesce(new.content, new.content_text), new.tool_name; END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN INSERT INTO messages_fts(messages_fts, rowid, content, tool_name) SELECT 'delete', old.id, coalesce(old.content, old.content_text), old.tool_name; END",
    "CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages BEGIN INSERT INTO messages_fts_trigram(rowid, content) SELECT new.id, coalesce(new.content, new.content_text) WHERE new.role <> 'tool'; END",
    "CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, content_text, role ON messages BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) SELECT 'delete', old.id, coalesce(old.content, old.content_text) WHERE old.role <> 'tool'; INSERT INTO messages_fts_trigram(rowid, content) SELECT new.id, coalesce(new.content, new.content_text) WHERE new.role <> 'tool'; END",
    "CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages BEGIN INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) SELECT 'delete', old.id, coalesce(old.content, old.content_text) WHERE old.role <> 'tool'; END",
)


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


def _recreate(tables: Sequence[str], triggers: Sequence[str]) -> None:
    # One statement per op.execute: executescript would commit first and break the
    # migration's single transaction. Triggers come after the rebuild, as at run time.
    _reset_shadow_tables()
    for statement in FTS_DROP:
        op.execute(statement)
    for statement in tables:
        op.execute(statement)
    for name in INDEX_NAMES:
        op.execute(f"INSERT INTO {name}({name}) VALUES ('rebuild')")
    for statement in triggers:
        op.execute(statement)
    op.execute("DELETE FROM state_meta WHERE key = 'fts_stale'")


def _on_sqlite() -> bool:
    # Everything here is FTS5 or a SQLite partial index: nothing to do on PostgreSQL.
    return op.get_context().dialect.name == "sqlite"


def upgrade() -> None:
    if not _on_sqlite():
        return
    _recreate(FTS_TABLES, FTS_TRIGGERS)
    for statement in LONG_ROW_INDEXES:
        op.execute(statement)


def downgrade() -> None:
    if not _on_sqlite():
        return
    for statement in LONG_ROW_INDEXES:
        op.execute("DROP INDEX IF EXISTS " + statement.split()[2])
    _recreate(FTS_TABLES_0001, FTS_TRIGGERS_0001)
