"""The session a framework's conversation id maps to, the same way for every door."""

from __future__ import annotations

import hashlib
import re

from hermes_repo import IntegrityViolation, validate_session_id

__all__ = ["door_session_id"]

_HASHED = re.compile(r"[0-9a-f]{40}")


def door_session_id(framework_id: str, prefix: str) -> str:
    """``framework_id`` itself when it is a valid session id (the store's one rule,
    :func:`hermes_repo.validate_session_id`), else ``<prefix>-`` and 40 hex digits of its
    SHA-256: any text an application uses (an e-mail address, emoji, 300 characters, a
    lone surrogate) gets a session, always the same one. An id holding U+0000 is
    refused on every backend (a server's text cannot hold it: stored on SQLite, it
    could never be copied to PostgreSQL)."""
    if isinstance(framework_id, str) and "\x00" in framework_id:
        raise IntegrityViolation(
            f"the id {framework_id!r} holds the character U+0000 (NUL), which "
            "no store keeps in an id or title; remove it (or replace it, e.g. with "
            "U+FFFD) from the id"
        )
    try:
        valid = validate_session_id(framework_id)
    except IntegrityViolation:
        pass
    else:
        # A literal "<prefix>-<40 hex>" is hashed too: it would otherwise name the
        # session of the id that hashes to it, and read or clear its items.
        head, _, tail = valid.partition("-")
        if head != prefix or not _HASHED.fullmatch(tail):
            return valid
    digest = hashlib.sha256(framework_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{prefix}-{digest[:40]}"
