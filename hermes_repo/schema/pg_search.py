"""Full-text search objects on PostgreSQL, as data: the runtime and the tests read these.

Revision ``0004_postgresql_search`` freezes the same statements as literals; a test proves
they are equal. On PostgreSQL the derived index is kept by the database itself:

* a text search configuration, :data:`CONFIG`: a copy of ``simple`` whose word mappings
  go through ``unaccent`` first, so ``cafe`` finds ``café`` as the SQLite word index
  (``remove_diacritics 2``) does;
* :data:`VECTOR_COLUMN`, a STORED generated ``tsvector`` over the same projection the
  SQLite word index reads (the text and its tool calls' text, then the tool name),
  with a GIN index;
* a ``pg_trgm`` GIN expression index over the text of the rows the SQLite trigram index
  holds (every row but tool rows without CJK), for substring and CJK search;
* a partial b-tree index listing the rows longer than :data:`CAP`, which search scans
  with ``LIKE`` for the text beyond the cap, as on SQLite.

Why the text goes through ``translate`` first: PostgreSQL's parser knows URLs, hosts,
e-mail addresses, file paths, decimals and hyphenated words (``example.com`` is one
token), while FTS5's ``unicode61`` splits on every ASCII character that is not a letter
or a digit. Mapping ASCII punctuation to spaces before parsing leaves the parser words
and numbers, the same tokens as ``unicode61``; queries go through the same mapping.

Why one cap of 128 Ki characters (:data:`CAP`) and not SQLite's 1 Mi for the word
index: a ``tsvector`` holds at most 1 MB of lexemes and an INSERT whose generated value
is larger FAILS. 128 Ki characters are at most 512 KB of UTF-8, so no message can break
an insert; text beyond the cap is found by the ``LIKE`` scan of the long rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fts.projection import CJK_RANGES, TRIGRAM_CAP, projection_of

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = [
    "CAP",
    "CJK_CLASS",
    "CONFIG",
    "CREATE_STATEMENTS",
    "DERIVED_NAMES",
    "DROP_STATEMENTS",
    "EXTENSIONS",
    "EXTENSION_HOME_SQL",
    "EXTENSION_SCHEMA_SQL",
    "LONG_ROWS_INDEX",
    "PUNCTUATION",
    "TRGM_INDEX",
    "VECTOR_COLUMN",
    "VECTOR_INDEX",
    "capped_text",
    "cjk_row_condition",
    "extension_schemas",
    "in_extension",
    "long_row_condition",
    "render",
    "search_text",
    "sql_literal",
    "to_words",
    "trigram_row_filter",
    "word_text",
]

CONFIG = "hermes_search"
VECTOR_COLUMN = "search_vector"
VECTOR_INDEX = "ix_messages_search_vector"
TRGM_INDEX = "ix_messages_search_trgm"
LONG_ROWS_INDEX = "ix_messages_over_search_cap"
EXTENSIONS = ("pg_trgm", "unaccent")

# Equal to the SQLite trigram cap, so the trigram side matches SQLite row for row.
CAP = TRIGRAM_CAP

#: The ASCII characters that are neither letters nor digits: separators to unicode61.
PUNCTUATION = "".join(chr(c) for c in range(0x21, 0x7F) if not chr(c).isalnum())
_TO_SPACE = str.maketrans(PUNCTUATION, " " * len(PUNCTUATION))

# The CJK test as a PostgreSQL regular expression class, by code point like the GLOB.
CJK_CLASS = "[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]"

# Text search parser token types that can hold non-ASCII letters: unaccent runs first.
_ACCENTED_TOKENS = "word, numword, hword, numhword, hword_part, hword_numpart"


def sql_literal(value: str) -> str:
    """``value`` as a standard SQL string literal (``standard_conforming_strings`` is on)."""
    return "'" + value.replace("'", "''") + "'"


def search_text(t: str) -> str:
    """The searchable text of row ``t`` (``""`` for bare column names): the SQLite
    projection's expression verbatim (text content, then the tool calls' text)."""
    return projection_of(f"{t}." if t else "")


def capped_text(t: str) -> str:
    """What the indexes take from row ``t``: the first :data:`CAP` characters."""
    return f"left({search_text(t)}, {CAP})"


def word_text(expr: str) -> str:
    """``expr`` with ASCII punctuation mapped to spaces, as the word index reads it."""
    return f"translate({expr}, {sql_literal(PUNCTUATION)}, {sql_literal(' ' * len(PUNCTUATION))})"


def to_words(value: str) -> str:
    """The same mapping in Python, for query terms."""
    return value.translate(_TO_SPACE)


def cjk_row_condition(t: str) -> str:
    """True when the capped text of row ``t`` holds CJK (the SQLite GLOB's test)."""
    return f"{capped_text(t)} ~ {sql_literal(CJK_CLASS)}"


def trigram_row_filter(t: str) -> str:
    """The rows the trigram index holds; a query repeats it verbatim to use the index."""
    p = f"{t}." if t else ""
    return f"({p}role <> 'tool' OR {cjk_row_condition(t)})"


def long_row_condition(t: str) -> str:
    """True for a row whose text is longer than :data:`CAP` (the partial index's test)."""
    return f"length({search_text(t)}) > {CAP}"


def _vector() -> str:
    text = f"to_tsvector('{CONFIG}'::regconfig, {word_text(capped_text(''))})"
    tool_name = word_text("coalesce(tool_name, '')")
    tool = f"to_tsvector('{CONFIG}'::regconfig, {tool_name})"
    return f"{text} || {tool}"


def in_extension(extension: str, name: str) -> str:
    """``name`` (a dictionary, an operator class) of ``extension``, qualified by a mark
    that :func:`render` replaces with the schema the extension is installed in."""
    return f"EXT_SCHEMA({extension}).{name}"


# Templates: the extensions' objects are named through in_extension (a store in a
# schema of its own must find them wherever the database has them installed); the
# rest is created in the store's schema, the first of its search_path.
CREATE_STATEMENTS: tuple[str, ...] = (
    f"CREATE TEXT SEARCH CONFIGURATION {CONFIG} (COPY = simple)",
    f"ALTER TEXT SEARCH CONFIGURATION {CONFIG} ALTER MAPPING FOR {_ACCENTED_TOKENS}"
    f" WITH {in_extension('unaccent', 'unaccent')}, simple",
    f"ALTER TABLE messages ADD COLUMN {VECTOR_COLUMN} tsvector"
    f" GENERATED ALWAYS AS ({_vector()}) STORED",
    f"CREATE INDEX {VECTOR_INDEX} ON messages USING gin ({VECTOR_COLUMN})",
    f"CREATE INDEX {TRGM_INDEX} ON messages USING gin (({capped_text('')})"
    f" {in_extension('pg_trgm', 'gin_trgm_ops')}) WHERE {trigram_row_filter('')}",
    f"CREATE INDEX {LONG_ROWS_INDEX} ON messages (id) WHERE {long_row_condition('')}",
)

#: Where an extension is installed, or None.
EXTENSION_SCHEMA_SQL = (
    "SELECT quote_ident(n.nspname) FROM pg_extension e "
    "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = :name"
)
#: Where a missing extension goes: ``public`` when it exists and this role may create
#: in it (shared by every store of the database, so dropping one store's schema never
#: takes the others' indexes along), else the store's own schema.
EXTENSION_HOME_SQL = (
    "SELECT coalesce((SELECT quote_ident(nspname) FROM pg_namespace WHERE nspname = "
    "'public' AND has_schema_privilege(oid, 'CREATE')), quote_ident(current_schema()))"
)


def extension_schemas(conn: Connection) -> dict[str, str]:
    """Each of :data:`EXTENSIONS`' (quoted) schema, installing a missing one first (as
    revision 0004 does)."""
    from sqlalchemy import text  # on use: the doctor of a file loads no SQLAlchemy

    schemas = {}
    for name in EXTENSIONS:
        found = conn.execute(text(EXTENSION_SCHEMA_SQL), {"name": name}).scalar()
        if found is None:
            home = conn.execute(text(EXTENSION_HOME_SQL)).scalar_one()
            conn.execute(text(f"CREATE EXTENSION IF NOT EXISTS {name} SCHEMA {home}"))
            found = conn.execute(text(EXTENSION_SCHEMA_SQL), {"name": name}).scalar_one()
        schemas[name] = str(found)
    return schemas


def render(statements: tuple[str, ...], schemas: dict[str, str]) -> tuple[str, ...]:
    """``statements`` with each extension's mark replaced by its (quoted) schema."""
    out = []
    for statement in statements:
        for extension, schema in schemas.items():
            statement = statement.replace(f"EXT_SCHEMA({extension})", schema)
        out.append(statement)
    return tuple(out)


# The extensions stay: other objects of the database may use them.
DROP_STATEMENTS: tuple[str, ...] = (
    f"DROP INDEX IF EXISTS {LONG_ROWS_INDEX}",
    f"DROP INDEX IF EXISTS {TRGM_INDEX}",
    f"DROP INDEX IF EXISTS {VECTOR_INDEX}",
    f"ALTER TABLE messages DROP COLUMN IF EXISTS {VECTOR_COLUMN}",
    f"DROP TEXT SEARCH CONFIGURATION IF EXISTS {CONFIG}",
)

#: Names of the derived objects, kept out of MetaData and autogenerate.
DERIVED_NAMES: frozenset[str] = frozenset(
    {VECTOR_COLUMN, VECTOR_INDEX, TRGM_INDEX, LONG_ROWS_INDEX}
)
