"""Names a package exports but imports on first use (PEP 562).

``import hermes_repo`` and the read commands must not load the ORM, Alembic or the
importer of Hermes' store: the packages whose public names live in heavy modules map each
name to its module and resolve it in their ``__getattr__`` the first time it is asked
for. One loader serves them all, so each keeps only its table of names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str,
    namespace: MutableMapping[str, Any],
    lazy: Mapping[str, str],
    missing: Callable[[str], Any] | None = None,
) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package`` (whose globals are ``namespace``) for the names
    in ``lazy``, each mapped to ``".module"`` or ``".module:attribute"`` (relative to the
    package). The value found is stored in ``namespace``, so later lookups never come
    back here; a name not in ``lazy`` goes to ``missing`` (for example the warnings of
    :func:`hermes_repo.deprecation.moved_names`), else raises :class:`AttributeError`."""

    def __getattr__(name: str) -> Any:
        target = lazy.get(name)
        if target is None:
            if missing is not None:
                return missing(name)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = target.partition(":")
        value = getattr(importlib.import_module(module, package), attribute or name)
        namespace[name] = value
        return value

    return __getattr__
