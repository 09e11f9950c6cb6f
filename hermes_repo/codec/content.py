"""A message's content as columns: text as is, or JSON parts plus the searchable text
projection full-text search indexes; and the searchable text of its tool calls."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .checks import _json
from .keys import _check_keys
from .text import dumps, has_surrogates, scrub

__all__ = ["calls_text", "content_columns", "parts_text"]


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


def calls_text(tool_calls: Any) -> str | None:
    """The searchable text of a message's tool calls (the ``calls_text`` column), or None.

    Each call gives its function's name, then its arguments: arguments that are JSON
    text (what model APIs send) give their keys and values in document order, decoded,
    so a word after an escaped newline or quote is a word of its own; other arguments
    give their text as is. A call shaped ``{"function": {...}}`` (OpenAI, Hermes) or
    ``{"name": ..., "arguments" | "input": ...}`` is read; ids and types are not (they
    would match every call). Every writer of ``tool_calls`` derives the column here,
    and migration ``0007_tool_call_search`` froze this rule for the rows stored before
    it. Lone surrogates and U+0000 become U+FFFD: the text is searchable on every backend.
    """
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
                texts.append(arguments)  # not JSON (a model's truncated call): as it is
                continue
        _leaves(arguments, texts)
    text = " ".join(t for t in texts if t)
    if not text:
        return None
    return scrub(text).replace("\x00", "\ufffd")


def _leaves(value: Any, out: list[str]) -> None:
    """Append the keys, text and numbers of a decoded JSON value to ``out``, in order.

    Iterative, so arguments nested as deep as JSON allows never recurse here.
    """
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
