"""A message's content as columns: text as is, or JSON parts plus the searchable text
projection full-text search indexes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .checks import _json
from .keys import _check_keys
from .text import dumps, has_surrogates, scrub

__all__ = ["content_columns", "parts_text"]


def content_columns(content: Any) -> dict[str, str | None]:
    """Column values for a message's content: text, or JSON parts plus their searchable text.

    Every writer of ``content`` (append, repair) goes through here, so the indexed
    projection of a row is always derived the same way. Text holding a lone surrogate
    is kept exactly as a JSON string in ``content_parts``, with a searchable copy
    (U+FFFD for each surrogate) in ``content_text``. Raises :class:`IntegrityViolation`
    for content JSON cannot hold.
    """
    if content is None:
        return {"content": None, "content_parts": None, "content_text": None}
    if isinstance(content, str):
        if not has_surrogates(content):
            return {"content": content, "content_parts": None, "content_text": None}
        return {"content": None, "content_parts": dumps(content), "content_text": scrub(content)}
    _check_keys("content", content)
    text = parts_text(content)
    return {
        "content": None,
        "content_parts": _json("content", content),
        "content_text": None if text is None else scrub(text),
    }


def parts_text(content: Any) -> str | None:
    """The text of multimodal parts (``{"type": "text", "text": ...}``) joined by spaces."""
    if not isinstance(content, list):
        return None
    texts = [
        p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
    ]
    return " ".join(texts) if texts else None
