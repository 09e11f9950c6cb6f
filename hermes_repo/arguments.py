"""Arguments of the public API, checked where they enter: one library error naming each.

A caller's wrong type or impossible value (a limit of ``"5"`` or NaN, a session id of
``5``, a budget of ``-1``) used to reach SQLite, the driver or Python's own operators and
leave as a ``TypeError``, ``ValueError`` or ``OverflowError`` naming none of the call's
arguments. Each check here raises :class:`~hermes_repo.errors.InvalidArgumentError`
(a ``ValueError`` too) naming the argument, the value and what is accepted, before
anything is read or written.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import InvalidArgumentError

__all__ = [
    "MAX_INT64",
    "budget_seconds",
    "flag",
    "message_list",
    "optional_text",
    "path_argument",
    "whole_number",
]

#: The largest integer SQLite and PostgreSQL store (a signed 64-bit integer).
MAX_INT64 = 2**63 - 1


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def whole_number(name: str, value: Any, *, minimum: int = 0, maximum: int = MAX_INT64) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (a bool or a float is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(
            f"{name} must be a whole number (int), got {type(value).__name__} {_shown(value)}"
        )
    if not minimum <= value <= maximum:
        raise InvalidArgumentError(
            f"{name} must be between {minimum:,} and {maximum:,}, got {_shown(value)}"
        )
    return value


def optional_text(name: str, value: Any) -> str | None:
    """``value`` when it is a str or None."""
    if value is not None and not isinstance(value, str):
        raise InvalidArgumentError(
            f"{name} must be text (str) or None, got {type(value).__name__} {_shown(value)}"
        )
    return value


def flag(name: str, value: Any) -> bool:
    """``value`` when it is a bool (an int or a string is a mistake worth naming)."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(
            f"{name} must be True or False, got {type(value).__name__} {_shown(value)}"
        )
    return value


def budget_seconds(name: str, value: Any) -> float | None:
    """A time budget: None (the default) or a finite number of seconds >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(
            f"{name} must be a number of seconds (int or float), got "
            f"{type(value).__name__} {_shown(value)}"
        )
    if not (math.isfinite(value) and value >= 0):
        raise InvalidArgumentError(
            f"{name} must be a finite number of seconds >= 0, got {_shown(value)}"
        )
    return float(value)


def path_argument(name: str, value: Any) -> Path:
    """``value`` as a Path: a str or path-like naming something the OS can name."""
    if isinstance(value, bytes) or not isinstance(value, str | os.PathLike):
        raise InvalidArgumentError(
            f"{name} must be a path (str or os.PathLike), got {type(value).__name__} "
            f"{_shown(value)}"
        )
    path = Path(value)
    try:
        os.fsencode(path)
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"{name} {_shown(str(path))} cannot be a file name on this system ({exc.reason})"
        ) from exc
    if "\x00" in str(path):
        raise InvalidArgumentError(f"{name} {_shown(str(path))} holds a NUL character")
    if str(path) in ("", "."):
        # Path("") is the working folder: a store would land wherever the caller runs.
        raise InvalidArgumentError(f"{name} is empty; pass the folder or file to use")
    return path


def message_list(name: str, value: Any) -> list[Any]:
    """Messages as a list: any iterable but a str, bytes or a mapping (iterating one of
    those would hand its characters or keys on as messages)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise InvalidArgumentError(
            f"{name} must be a list of message dicts, got {type(value).__name__} {_shown(value)}"
        )
    return list(value)
