"""Spool file names: the encoded session id plus the suffix of the file's kind.

``<sid>`` stands for the *encoded* session id (:func:`encode_session_id`).
Names of ids made of lower-case letters, digits, ``_``, ``-`` and ``:`` are the id
itself; ``.`` becomes ``+`` and upper-case letters become lower case with a mask of
their positions after ``=`` (``Chat.V2`` -> ``chat+v2=21``). So the sid part never holds
a ``.`` (the first ``.`` starts the suffix: ``chat.pending`` held in
``chat+pending.jsonl`` never meets ``chat.pending.jsonl``, the retry queue of ``chat``)
and is all lower case (``Chat-1`` and ``chat-1`` stay two files on a case-insensitive
filesystem). Files of the previous version, named ``<id><suffix>`` with the id as is,
are still found, listed and replayed; in the one case where such a name is ambiguous
(``x.pending.jsonl``: the queue of ``x`` or the hold file of ``x.pending``) it is
read as the queue of ``x``, the common case.

Besides the retry queue (``<sid>.pending.jsonl``), two siblings share the format and
the safety rules but are never replayed:

* ``<sid>.rejected.jsonl``: lines the replay could not use (a torn last line from a crash
  mid-append, invalid JSON, an invalid message), byte for byte, for inspection;
* ``<sid>.jsonl``: the hold file a writer uses while the database file is damaged
  (replaying into a damaged file would spread the damage). Not the salvage (``sessions
  salvage`` reads rows out of the damaged file itself): an operator moves a hold file
  into the queue once the store is sound again (``doctor`` says how).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

from ...deprecation import moved_names
from ...errors import IntegrityViolation
from ...ids import validate_session_id

SESSIONS_DIR = "sessions"
PENDING_SUFFIX = ".pending.jsonl"
REJECTED_SUFFIX = ".rejected.jsonl"
HOLD_SUFFIX = ".jsonl"


def sessions_dir(home: str | os.PathLike[str]) -> Path:
    """``<home>/sessions``: where spool, rejected and hold files live."""
    return Path(home) / SESSIONS_DIR


# Characters a session id cannot hold (see hermes_repo.ids), so no encoded name can
# be read as another id's: "+" stands for ".", "=" starts the upper-case mask.
_DOT = "+"
_MASK = "="
_MASK_HEX = re.compile(r"[1-9a-f][0-9a-f]*")
_SUFFIXES = (PENDING_SUFFIX, REJECTED_SUFFIX, HOLD_SUFFIX)  # longest first


def encode_session_id(session_id: str) -> str:
    """The file-name form of a (validated) session id: no ``.``, no upper case, injective.

    ``.`` becomes ``+``; upper-case letters are lowered and their positions kept as a
    hexadecimal bit mask after ``=`` (bit *i* set: character *i* was upper case). Ids
    of lower-case letters, digits, ``_``, ``-`` and ``:`` are their own encoding, so
    the names of today's common ids do not change. At most 128 + 33 characters.
    """
    sid = validate_session_id(session_id)
    mask = 0
    for i, ch in enumerate(sid):
        if "A" <= ch <= "Z":
            mask |= 1 << i
    out = sid.lower().replace(".", _DOT)
    return out + (f"{_MASK}{mask:x}" if mask else "")


def _decode(stem: str) -> str | None:
    base, sep, mask_hex = stem.partition(_MASK)
    if sep and not _MASK_HEX.fullmatch(mask_hex):
        return None
    mask = int(mask_hex, 16) if sep else 0
    chars = list(base.replace(_DOT, "."))
    if mask >> len(chars):
        return None
    for i, ch in enumerate(chars):
        if mask >> i & 1:
            chars[i] = ch.upper()
    try:
        sid = validate_session_id("".join(chars))
    except IntegrityViolation:
        return None
    # Only the one canonical spelling counts (a mask bit on a digit, "+" where the id
    # holds no dot...): one id, one name, both ways.
    return sid if encode_session_id(sid) == stem else None


def pending_name(session_id: str, suffix: str = PENDING_SUFFIX) -> str:
    """The file name for ``session_id`` (validated, then encoded: see
    :func:`encode_session_id`)."""
    return encode_session_id(session_id) + suffix


def _legacy_name(session_id: str, suffix: str) -> str:
    """The name the previous version gave the file: the id as is."""
    return validate_session_id(session_id) + suffix


def parse_name(name: str) -> tuple[str, str] | None:
    """``(session id, suffix)`` of a spool, rejected or hold file name, else None.

    The current form first (the first ``.`` starts the suffix); then the previous
    version's (the id as is, before the longest known suffix).
    """
    stem, dot, rest = name.partition(".")
    if dot and "." + rest in _SUFFIXES:
        sid = _decode(stem)
        if sid is not None:
            return sid, "." + rest
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            try:
                sid = validate_session_id(name[: -len(suffix)])
            except IntegrityViolation:
                return None
            # A lower-case id without dots names its file the same way in both forms;
            # here it would be a current name with an unknown suffix: not a spool file.
            return (sid, suffix) if encode_session_id(sid) != sid else None
    return None


def session_id_from_name(name: str, suffix: str = PENDING_SUFFIX) -> str | None:
    """The session id a ``*<suffix>`` file name stands for, or None if it names none."""
    parsed = parse_name(name)
    if parsed is None or parsed[1] != suffix:
        return None
    return parsed[0]


def existing_names(
    home: str | os.PathLike[str], session_id: str, suffix: str = PENDING_SUFFIX
) -> list[str]:
    """The ``suffix`` files of ``session_id`` that exist: the previous version's name
    (older records, so first) and the current one; the current name if neither does.
    """
    current = pending_name(session_id, suffix)
    legacy = _legacy_name(session_id, suffix)
    names = [current]
    if legacy != current and session_id_from_name(legacy, suffix) == session_id:
        with contextlib.suppress(OSError):
            if os.path.lexists(sessions_dir(home) / legacy):
                names.insert(0, legacy)
    return names


#: Names this module had before the hold file and the salvage were told apart.
_moved = moved_names(
    "hermes_repo.transcript.spool.names",
    {"SALVAGE_SUFFIX": "hermes_repo.transcript.spool.names:HOLD_SUFFIX"},
)


def __getattr__(name: str) -> Any:
    return _moved(name)
