"""Which store a spooled record belongs to, and the command that replays it there.

A record is replayed only into the store it names (see :mod:`hermes_repo.provenance`
and the rules in :mod:`hermes_repo.transcript.replay`): :func:`belongs_here` says
whether it may be replayed into this store, :func:`replay_command` where else it goes.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from ..database import Database, WriteCore
from ..engine import DB_NAME, db_path_for_home
from ..engine_pg import resolve_url
from ..errors import ConfigurationError, HermesRepoError
from ..provenance import (
    StoreIdentity,
    read_identity,
    sqlite_target,
    target_display_command,
    target_key,
    url_target,
)
from . import spool

__all__ = [
    "ADOPT_LEGACY",
    "belongs_here",
    "check_adopt",
    "identity_of",
    "replay_command",
    "target_of",
    "why_not_here",
]

log = logging.getLogger("hermes_repo.transcript")

#: ``adopt`` value for records of an older version that name no store.
ADOPT_LEGACY = "legacy"


def identity_of(store: WriteCore) -> StoreIdentity:
    """The identity of the store a replay writes into, as its ``state_meta`` says now
    (read again: an id made or a ``copied_from`` recorded since the open counts). If it
    cannot be read, the one the store read at its open; with neither, the error is
    raised: which records belong here cannot be told, so none is replayed."""
    database = getattr(store, "database", store)
    cached = getattr(store, "store_identity", None)
    if not isinstance(database, Database):
        if isinstance(cached, StoreIdentity):
            return cached
        return StoreIdentity(None, sqlite_target(store.path), store.backend.is_file)
    try:
        return read_identity(database)
    except HermesRepoError:
        if isinstance(cached, StoreIdentity):
            return cached
        raise


def _same_target(a: str | None, b: str | None) -> bool:
    key = target_key(a)
    return key is not None and key == target_key(b)


def belongs_here(
    owner: spool.SpoolOwner,
    here: StoreIdentity,
    *,
    spooled_at: float,
    adopt: frozenset[str] = frozenset(),
) -> str | None:
    """None when a record of ``owner`` may be replayed into the store ``here``; else why
    not. The rule (see the module docstring): a record naming a store id goes only into
    that store (or one that adopts it); one naming only a target, into a store at that
    target; one naming neither (an older version's), only into a SQLite store, and never
    into one created after its file was last written."""
    if owner.store_id:
        if owner.store_id == here.store_id or owner.store_id in adopt:
            return None
        if here.store_id:
            mine = f"store {here.store_id}"
        elif here.created_at == math.inf:
            mine = "the new store an open here would create"
        else:
            mine = "this store (no id yet)"
        if _same_target(owner.target, here.target):
            return (
                f"belongs to store {owner.store_id}, which was at {owner.target}; the file "
                f"there now is {mine} (moved or replaced): put that store's file back and "
                "replay them, or adopt them into a store copied from it"
            )
        at = f" at {owner.target}" if owner.target else ""
        return f"belongs to store {owner.store_id}{at}, not {mine}"
    if owner.target:
        if _same_target(owner.target, here.target):
            return None
        return f"was spooled for the store at {owner.target}, not this one ({here.target})"
    if ADOPT_LEGACY in adopt:
        return None
    if not here.is_file:
        return (
            "was spooled by an older version, which did not record its store; a server "
            "never replays such records unless told to (--adopt legacy)"
        )
    if here.created_at is not None and spooled_at < here.created_at:
        return (
            "was spooled by an older version (no store recorded) before this store was "
            "created, so it belongs to another store (the server this home's agent used?)"
        )
    return None


def why_not_here(owner: spool.SpoolOwner, here: StoreIdentity, *, spooled_at: float) -> str | None:
    """:func:`belongs_here` for a report that did not read the store's id (a server's,
    when the report does not connect): a record naming a store id is then placed by
    its target."""
    if owner.store_id and here.store_id is None and not here.is_file:
        key = target_key(owner.target)
        if key is not None and key == target_key(here.target):
            return None
        return f"belongs to store {owner.store_id} at {owner.target}"
    return belongs_here(owner, here, spooled_at=spooled_at)


def replay_command(owner: spool.SpoolOwner, here: StoreIdentity, path: Path) -> str | None:
    """The command that replays records of ``owner`` (in the spool file ``path``)
    where they belong (None: unknown).

    A record of a store this one was copied from is adopted here; one whose store is
    elsewhere is replayed by that store; an older version's record by the operator who
    knows its store (``--adopt legacy`` on that store)."""
    home = path.parent.parent
    if owner.store_id and owner.store_id in here.copied_from:
        command = target_display_command(
            here.target, f"pending replay --adopt {owner.store_id}", home=home
        )
    elif owner.target and not (owner.store_id and _same_target(owner.target, here.target)):
        command = target_display_command(owner.target, "pending replay", home=home)
    elif owner.known:
        command = None
    elif here.is_file and here.created_at == math.inf:
        # No store file in this home: the records are most likely those of the server
        # the home's agent used; only the operator knows its URL.
        command = (
            f"hermes-repo --home {shlex.quote(str(home))} --url URL pending replay "
            f"--adopt {ADOPT_LEGACY}"
        )
    else:
        command = target_display_command(
            here.target, f"pending replay --adopt {ADOPT_LEGACY}", home=home
        )
    return None if command is None else command.replace("{file}", shlex.quote(str(path)))


def check_adopt(here: StoreIdentity, adopt: Sequence[str]) -> frozenset[str]:
    for store_id in adopt:
        if store_id != ADOPT_LEGACY and store_id not in here.copied_from:
            listed = ", ".join(here.copied_from) or "no store"
            raise ConfigurationError(
                f"this store ({here.target}) was not copied from store {store_id} (it was "
                f"copied from {listed}); its spool records are replayed by that store: run "
                "`hermes-repo pending list` to see the command for each file"
            )
    return frozenset(adopt)


def target_of(home: Path, target: str | os.PathLike[str] | None) -> str:
    """The target fingerprint of what a writer without a store was trying to open."""
    if target is not None:
        text = os.fspath(target)
        if "://" in text:
            return url_target(text)
        path = Path(text)
        return sqlite_target(path / DB_NAME if path.is_dir() else path)
    try:
        server = resolve_url(None)
    except HermesRepoError as exc:
        log.warning("spool records name the home's SQLite file: %s", exc)
        server = None
    if server is not None:
        return url_target(server.url)
    return sqlite_target(db_path_for_home(home))
