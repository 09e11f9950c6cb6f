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
    parts = _json("content", content)  # first: it refuses what parts_text must not walk
    text = parts_text(content)
    return {
        "content": None,
        "content_parts": parts,
        "content_text": None if text is None else scrub(text),
    }


#: In a typed part (a mapping with a ``type``: OpenAI and Anthropic content parts), the
#: keys that hold text a person wrote or read: ``text``, ``refusal``, a ``tool_result``'s
#: ``content`` (text or parts), ``output``, audio ``transcript``s, reasoning
#: ``summary``/``thinking``. Its other keys hold ids, URLs, base64 payloads, signatures:
#: indexing them would bloat the indexes and match noise.
TEXT_KEYS = frozenset(
    {"text", "refusal", "content", "output", "transcript", "summary", "thinking", "input_text"}
)
#: In an untyped mapping every value is read except these (binary or addresses).
SKIPPED_KEYS = frozenset(
    {"url", "image_url", "input_audio", "file", "file_data", "data", "b64_json", "signature"}
)


def parts_text(content: Any) -> str | None:
    """The searchable text of content that is not a plain string, or None.

    Multimodal parts give their text (``{"type": "text", "text": ...}``), refusals,
    tool results (their ``content``, text or parts) and transcripts; a list of strings
    gives each string; a mapping without a ``type`` gives its values (not URLs or
    base64 payloads); a number is its decimal text. Text is joined by spaces in document
    order. Every writer derives ``content_text`` here, and migration
    ``0005_searchable_content`` froze this rule to recompute the rows stored before it.
    """
    if isinstance(content, bool):
        return None
    if isinstance(content, int | float):
        return repr(content)
    texts: list[str] = []
    # Iterative, so content nested as deep as the codec accepts never recurses here;
    # a container met twice (a cycle, which the codec refuses anyway) is read once.
    seen: set[int] = set()
    stack: list[Any] = [content]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            texts.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, list):
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
