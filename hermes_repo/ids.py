"""Session ids: validated once, because they become file names of spool files."""

from __future__ import annotations

import re
import time
import uuid

from .errors import IntegrityViolation

__all__ = ["MAX_SESSION_ID_LENGTH", "check_session_id", "new_session_id", "validate_session_id"]

MAX_SESSION_ID_LENGTH = 128
# Letters, digits and . _ : - ; must start with a letter or digit (so never "." or "..").
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")


def new_session_id() -> str:
    """A fresh session id: a UTC time prefix (sorts by creation) plus randomness."""
    return f"{time.strftime('%Y%m%d_%H%M%S', time.gmtime())}_{uuid.uuid4().hex[:12]}"


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is safe as a file name inside the store folder.

    Raises :class:`IntegrityViolation` naming the rule otherwise: no path separators, no
    ``..``, no leading dot, at most 128 characters of ``[A-Za-z0-9._:-]``.
    """
    if not isinstance(session_id, str):
        raise IntegrityViolation(f"session id must be a string, got {type(session_id).__name__}")
    if not session_id or len(session_id) > MAX_SESSION_ID_LENGTH:
        raise IntegrityViolation(
            f"session id must be 1-{MAX_SESSION_ID_LENGTH} characters, got {len(session_id)}"
        )
    if ".." in session_id or not _SESSION_ID.fullmatch(session_id):
        raise IntegrityViolation(
            f"session id {session_id!r} is not allowed: use letters, digits and . _ : - "
            "(starting with a letter or digit, no '..', no path separators)"
        )
    return session_id


def check_session_id(session_id: object, what: str = "session id") -> str:
    """Return ``session_id`` if the store can look it up: a string SQLite can hold.

    Looser than :func:`validate_session_id` (which new sessions must pass), so every id
    stored by an earlier version still works; refuses what no stored row can have (a
    non-string, a lone surrogate) with :class:`IntegrityViolation` instead of a raw
    encoding error.
    """
    if session_id.__class__ is str:
        text: str = session_id
        if text.isascii():
            return text
    elif not isinstance(session_id, str):
        raise IntegrityViolation(
            f"{what} must be a string, got {type(session_id).__name__}; pass the id as text"
        )
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError:
        raise IntegrityViolation(
            f"{what} {session_id!r} is not valid Unicode text (it holds a lone surrogate or "
            "bytes that are not UTF-8); pass the id exactly as `hermes-repo sessions list` "
            "shows it"
        ) from None
    return session_id
