"""Every content shape the store accepts is searchable by its text.

Revision ID: 0005_searchable_content
Revises: 0004_postgresql_search
Create Date: 2026-12-01

``messages.content_text`` is the searchable text of content that is not a plain string
(both backends index it). Until now it held only the ``text`` of multimodal parts, so
content stored as a refusal, a ``tool_result``, a list of strings, a mapping or a number
was never found. The rule now reads those too (``hermes_repo.codec.content.parts_text``);
this revision recomputes the column for the rows stored before it, in batches by id, with
the rule frozen here (a later change of the rule needs a revision of its own). On SQLite
the update triggers re-index exactly the rows whose text changed; on PostgreSQL the
generated ``search_vector`` follows the column. The downgrade restores the old rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0005_searchable_content"
down_revision: str | Sequence[str] | None = "0004_postgresql_search"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 2000
_SURROGATE = re.compile("[\ud800-\udfff]")
TEXT_KEYS = frozenset(
    {"text", "refusal", "content", "output", "transcript", "summary", "thinking", "input_text"}
)
SKIPPED_KEYS = frozenset(
    {"url", "image_url", "input_audio", "file", "file_data", "data", "b64_json", "signature"}
)


def _text_0005(content: Any) -> str | None:
    if isinstance(content, bool):
        return None
    if isinstance(content, int | float):
        return repr(content)
    texts: list[str] = []
    stack: list[Any] = [content]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            texts.append(node)
        elif isinstance(node, list):
            stack.extend(reversed(node))
        elif isinstance(node, Mapping):
            typed = "type" in node
            kept = [
                v
                for k, v in node.items()
                if isinstance(v, str | list | Mapping)
                and (k in TEXT_KEYS if typed else k not in SKIPPED_KEYS)
            ]
            stack.extend(reversed(kept))
    return " ".join(texts) if texts else None


def _text_0004(content: Any) -> str | None:
    if not isinstance(content, list):
        return None
    texts = [
        p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
    ]
    return " ".join(texts) if texts else None


def _recompute(rule: Callable[[Any], str | None]) -> None:
    bind = op.get_bind()
    messages = sa.table(
        "messages",
        sa.column("id", sa.Integer),
        sa.column("content_parts", sa.Text),
        sa.column("content_text", sa.Text),
    )
    select = (
        sa.select(messages.c.id, messages.c.content_parts, messages.c.content_text)
        .where(messages.c.content_parts.is_not(None), messages.c.id > sa.bindparam("after"))
        .order_by(messages.c.id)
        .limit(BATCH)
    )
    update = (
        sa.update(messages)
        .where(messages.c.id == sa.bindparam("row_id"))
        .values(content_text=sa.bindparam("text"))
    )
    after = -1
    while True:
        rows = bind.execute(select, {"after": after}).all()
        if not rows:
            return
        after = rows[-1][0]
        changed = []
        for row_id, parts, old in rows:
            try:
                value = json.loads(parts)
            except (ValueError, RecursionError):
                continue  # not JSON this store wrote: left as it is
            if isinstance(value, str):
                continue  # text holding a lone surrogate: its searchable copy is right
            text = rule(value)
            if text is not None and not text.isascii():
                text = _SURROGATE.sub("\ufffd", text)
            if text != old:
                changed.append({"row_id": row_id, "text": text})
        if changed:
            bind.execute(update, changed)


def upgrade() -> None:
    _recompute(_text_0005)


def downgrade() -> None:
    _recompute(_text_0004)
