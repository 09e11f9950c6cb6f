"""PostgreSQL full-text search: a tsvector kept by the database, GIN and pg_trgm indexes.

Revision ID: 0004_postgresql_search
Revises: 0003_session_extra
Create Date: 2026-12-01

A no-op on SQLite, whose FTS5 indexes revision 0002 made. On PostgreSQL:

* the ``pg_trgm`` and ``unaccent`` extensions (found wherever the database has them;
  a missing one is installed in ``public``, else in the store's own schema, and their
  objects are named qualified, so a store in a schema of its own finds them), and a
  text search configuration
  ``hermes_search`` (``simple`` with ``unaccent`` first), so ``cafe`` finds ``café`` as
  the SQLite word index does;
* ``messages.search_vector``, a STORED generated ``tsvector`` over the text (first 128 Ki
  characters, ASCII punctuation as spaces, as FTS5's unicode61 splits) and the tool
  name, with a GIN index: the database keeps it, no trigger can drift;
* a ``pg_trgm`` GIN index over the capped text of the rows the SQLite trigram index
  holds (every row but tool rows without CJK), for substring and CJK search;
* a partial index of the rows longer than the cap, whose end search scans with LIKE.

The cap keeps every generated ``tsvector`` under PostgreSQL's 1 MB limit: a larger
value would make the INSERT of a huge message fail. Adding a STORED column rewrites
``messages`` once. The DDL is frozen here as literal text; a test proves it equals what
``hermes_repo.schema.pg_search`` holds.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0004_postgresql_search"
down_revision: str | Sequence[str] | None = "0003_session_extra"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Where each extension is installed (or None), and where a missing one goes: public
# when it exists and may be created in, else the store's own schema.
EXTENSIONS = ("pg_trgm", "unaccent")
EXTENSION_SCHEMA_SQL = (
    "SELECT quote_ident(n.nspname) FROM pg_extension e "
    "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = :name"
)
EXTENSION_HOME_SQL = (
    "SELECT coalesce((SELECT quote_ident(nspname) FROM pg_namespace WHERE nspname = "
    "'public' AND has_schema_privilege(oid, 'CREATE')), quote_ident(current_schema()))"
)

# EXT_SCHEMA(name) stands for the schema extension ``name`` is installed in.
SEARCH_CREATE = (
    "CREATE TEXT SEARCH CONFIGURATION hermes_search (COPY = simple)",
    "ALTER TEXT SEARCH CONFIGURATION hermes_search ALTER MAPPING FOR word, numword, hword, numhword, hword_part, hword_numpart WITH EXT_SCHEMA(unaccent).unaccent, simple",
    "ALTER TABLE messages ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (to_tsvector('hermes_search'::regconfig, translate(left(coalesce(content, content_text), 131072), '!\"#$%&''()*+,-./:;<=>?@[\\]^_`{|}~', '                                ')) || to_tsvector('hermes_search'::regconfig, translate(coalesce(tool_name, ''), '!\"#$%&''()*+,-./:;<=>?@[\\]^_`{|}~', '                                '))) STORED",
    "CREATE INDEX ix_messages_search_vector ON messages USING gin (search_vector)",
    "CREATE INDEX ix_messages_search_trgm ON messages USING gin ((left(coalesce(content, content_text), 131072)) EXT_SCHEMA(pg_trgm).gin_trgm_ops) WHERE (role <> 'tool' OR left(coalesce(content, content_text), 131072) ~ '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]')",
    "CREATE INDEX ix_messages_over_search_cap ON messages (id) WHERE length(coalesce(content, content_text)) > 131072",
)

SEARCH_DROP = (
    "DROP INDEX IF EXISTS ix_messages_over_search_cap",
    "DROP INDEX IF EXISTS ix_messages_search_trgm",
    "DROP INDEX IF EXISTS ix_messages_search_vector",
    "ALTER TABLE messages DROP COLUMN IF EXISTS search_vector",
    "DROP TEXT SEARCH CONFIGURATION IF EXISTS hermes_search",
)


def _on_postgresql() -> bool:
    return bool(context.get_context().dialect.name == "postgresql")


def _extension_schemas() -> dict[str, str]:
    """Each extension's (quoted) schema, installing a missing one first."""
    if context.is_offline_mode():  # no database to ask: the default schema
        for name in EXTENSIONS:
            op.execute(f"CREATE EXTENSION IF NOT EXISTS {name} SCHEMA public")
        return dict.fromkeys(EXTENSIONS, "public")
    bind = op.get_bind()
    schemas = {}
    for name in EXTENSIONS:
        found = bind.execute(sa.text(EXTENSION_SCHEMA_SQL), {"name": name}).scalar()
        if found is None:
            home = bind.execute(sa.text(EXTENSION_HOME_SQL)).scalar_one()
            bind.execute(sa.text(f"CREATE EXTENSION IF NOT EXISTS {name} SCHEMA {home}"))
            found = bind.execute(sa.text(EXTENSION_SCHEMA_SQL), {"name": name}).scalar_one()
        schemas[name] = str(found)
    return schemas


def upgrade() -> None:
    if not _on_postgresql():
        return
    schemas = _extension_schemas()
    for statement in SEARCH_CREATE:
        for name, schema in schemas.items():
            statement = statement.replace(f"EXT_SCHEMA({name})", schema)
        op.execute(statement)


def downgrade() -> None:
    if not _on_postgresql():
        return
    for statement in SEARCH_DROP:
        op.execute(statement)
