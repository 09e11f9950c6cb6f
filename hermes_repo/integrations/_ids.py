"""The session a framework's conversation id maps to, the same way for every door."""

from __future__ import annotations

import hashlib

from hermes_repo import IntegrityViolation, validate_session_id

__all__ = ["door_session_id"]


def door_session_id(framework_id: str, prefix: str) -> str:
    """``framework_id`` itself when it is a valid session id (the store's one rule,
    :func:`hermes_repo.validate_session_id`), else ``<prefix>-`` and 40 hex digits of its
    SHA-256: any text an application uses (an e-mail address, emoji, 300 characters, a
    lone surrogate) gets a session, always the same one."""
    try:
        return validate_session_id(framework_id)
    except IntegrityViolation:
        pass
    digest = hashlib.sha256(framework_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{prefix}-{digest[:40]}"
