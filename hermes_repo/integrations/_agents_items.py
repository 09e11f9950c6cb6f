"""OpenAI Agents SDK items as message rows and back, exactly.

An item (``TResponseInputItem``: an easy message, an output message, a function call or
its output, a reasoning item...) becomes one message row of the session:

* its text lives in the row's ``content`` (the first of ``content``, ``output``,
  ``arguments``, ``summary`` it has, lifted out as it is), so full-text search and the
  CLI see it without the row holding it twice;
* the rest of the item, and where the lifted key stood, live in one ``extra`` key, so
  the item comes back with the same keys in the same order and the same values;
* ``role`` is the item's own when hermes knows it (``developer`` is shown as
  ``system``), ``tool`` for a ``*_output`` item and ``assistant`` for the other
  model-made items: what an operator reading the session expects;
* ``display_only``: the framework replays its own items. Hermes' transcript repair
  merges consecutive same-role rows and drops tool rows without a call, which is right
  for a chat transcript and wrong for a list of Responses items (an output message and
  the function call after it are both ``assistant``); repair leaves display-only rows
  alone.

The items are first taken through JSON, as the SDK's own ``SQLiteSession`` stores them
(``json.dumps``): what comes back is what ``json.loads`` gives there (tuples as lists,
integer keys as text), and what JSON cannot hold is refused before anything is written.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from hermes_repo import IntegrityViolation, check_server_text, message_to_row

from ._ids import door_session_id

__all__ = [
    "ITEM_KEY",
    "SOURCE",
    "item_to_message",
    "message_to_item",
    "normalise_items",
    "session_key",
    "to_messages",
]

#: The ``source`` of sessions written through the OpenAI Agents SDK.
SOURCE = "openai-agents"
#: The ``extra`` key of a row that holds an item (the item less its lifted text).
ITEM_KEY = "openai_agents_item"

# Where an item keeps the text a person searches for, in order of preference.
_TEXT_KEYS = ("content", "output", "arguments", "summary")
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _nul_free(value: Any) -> Any:
    """``value``'s text for search with U+0000 as a space (a server's text columns
    cannot hold it; the exact item is kept whole in ``extra``, where JSON escapes it)."""
    if isinstance(value, str):
        return value.replace("\x00", " ")
    return None


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    return value is not None and "\\u0000" in json.dumps(value)


def normalise_items(items: Sequence[Any]) -> list[dict[str, Any]]:
    """The items as ``json.loads(json.dumps(item))`` gives them; refuses what JSON
    cannot hold (NaN, bytes, objects) with the item's index, before anything is written."""
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence):
        raise IntegrityViolation(
            f"add_items takes a list of items, got {type(items).__name__}; pass [item, ...]"
        )
    normalised: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise IntegrityViolation(
                f"item {index} is a {type(item).__name__}, not a dict; pass items such as "
                '{"role": "user", "content": "..."}'
            )
        try:
            text = json.dumps(item, allow_nan=False)
        except RecursionError as exc:
            raise IntegrityViolation(
                f"item {index} is nested too deeply to store; flatten it: nothing of this "
                "call was written"
            ) from exc
        except (TypeError, ValueError) as exc:
            raise IntegrityViolation(
                f"item {index} cannot be stored as JSON ({exc}); pass plain JSON values "
                "(text, finite numbers, lists, dicts): nothing of this call was written"
            ) from exc
        normalised.append(json.loads(text))
    return normalised


def item_to_message(item: dict[str, Any], *, now: float | None = None) -> dict[str, Any]:
    """The message row for a normalised ``item`` (with a fresh ``uid`` and ``timestamp``)."""
    role = _ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
    if role is None:
        kind = item.get("type")
        role = "tool" if isinstance(kind, str) and kind.endswith("_output") else "assistant"
    message: dict[str, Any] = {
        "role": role,
        "uid": os.urandom(16).hex(),
        "timestamp": time.time() if now is None else now,
        "display_only": True,
    }
    rest = dict(item)
    envelope: dict[str, Any] = {}
    for key in _TEXT_KEYS:
        if key in rest:
            if _holds_nul(rest[key]):
                # Not lifted: on PostgreSQL the row's text could not hold it, and an
                # item must be stored whole or not at all on every backend.
                message["content"] = _nul_free(rest[key])
                break
            envelope["key"] = key
            envelope["at"] = list(rest).index(key)
            message["content"] = rest.pop(key)
            break
    envelope["item"] = rest
    message[ITEM_KEY] = envelope
    return message


def to_messages(
    items: Sequence[dict[str, Any]], session_id: str, *, server: bool
) -> list[dict[str, Any]]:
    """The message rows of normalised ``items``, each checked to be a row the store
    takes (``server``: PostgreSQL's text rules too) before any is written: one that is
    not refuses them all, naming its index."""
    messages = []
    for index, item in enumerate(items):
        message = item_to_message(item)
        try:
            row = message_to_row(session_id, message)
            if server:
                check_server_text(row)
        except IntegrityViolation as exc:
            raise IntegrityViolation(
                f"item {index} cannot be stored: {exc}; nothing of this call was written"
            ) from exc
        except RecursionError as exc:  # a codec walking a value deeper than JSON did
            raise IntegrityViolation(
                f"item {index} is nested too deeply to store; flatten it: nothing of this "
                "call was written"
            ) from exc
        messages.append(message)
    return messages


def message_to_item(message: Mapping[str, Any]) -> dict[str, Any]:
    """The item a row holds, as it was given; a row written through another door (no
    item in it) comes back as an easy input message of its role and content."""
    # Exact-type checks: a read of 50 items runs this 50 times, and rows are plain dicts.
    envelope: Any = message.get(ITEM_KEY)
    rest: Any = envelope.get("item") if envelope.__class__ is dict else None
    if rest.__class__ is not dict:
        return {"role": message.get("role"), "content": message.get("content")}
    key = envelope.get("key")
    if key is None:
        return dict(rest)
    pairs = list(rest.items())
    at = envelope.get("at")
    pairs.insert(at if at.__class__ is int else len(pairs), (key, message.get("content")))
    return dict(pairs)


def session_key(session_id: str) -> str:
    """The hermes session id that keeps the SDK session ``session_id``: the id itself
    when hermes accepts it (letters, digits, ``._:-``, at most 128 characters, no
    ``..``), else ``oa-`` and 40 hex digits of its SHA-256. The SDK's id is the session's
    title either way."""
    if not isinstance(session_id, str) or not session_id:
        raise IntegrityViolation(
            f"session_id must be a non-empty string, got {session_id!r}; pass the conversation's id"
        )
    return door_session_id(session_id, "oa")
