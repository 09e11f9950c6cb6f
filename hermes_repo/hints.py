"""Operator hints: a ``hermes-repo`` command made exact for one store.

A hint without ``--home`` runs against ``$HERMES_HOME`` (or ``~/.hermes``): an operator
whose environment points at another store who follows it literally acts on the wrong
store (installs a salvage over it, restores a snapshot into it).
"""

from __future__ import annotations

import os
import shlex

__all__ = ["command"]


def command(home: str | os.PathLike[str], rest: str) -> str:
    """``hermes-repo --home <home> <rest>``, the home quoted for a POSIX shell."""
    return f"hermes-repo --home {shlex.quote(os.fspath(home))} {rest}".rstrip()
