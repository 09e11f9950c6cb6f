"""Old names kept for one release, each warning every time it is used.

One word names one thing in this package: *replay* is the spool replay, *salvage*
reading rows out of a damaged store (the *hold file* is where a writer keeps messages
while the store is damaged), *repair* the transcript and value repairs, *rebuild* the
search index's guarded rebuild, and a unit of work's ``orm`` is its ORM session
(``sessions`` its session repository). Names that used another word still work for one
release: each use raises a :class:`DeprecationWarning` naming the new name, so a
program's test run (or ``python -W error::DeprecationWarning``) shows what to change.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["moved_names", "warn_renamed"]


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (the caller's caller's line,
    by default: the line that used the old name)."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def moved_names(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """The body of a module ``__getattr__`` (PEP 562) for names renamed or moved out of
    ``module`` (the module's ``__getattr__`` returns its result): ``moved`` maps an old
    name to ``"package.module:new_name"``. Each use warns and gives the new object."""

    def __getattr__(name: str) -> Any:
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, new = target.partition(":")
        # The module's own __getattr__ calls this one: the user's line is 4 frames up.
        warn_renamed(f"{module}.{name}", f"{where}.{new}", stacklevel=4)
        return getattr(importlib.import_module(where), new)

    return __getattr__
