"""Where ``hermes-repo db copy --to TARGET`` writes: a PostgreSQL URL or an SQLite store.

TARGET is one of:

* ``postgresql+psycopg://user[:password]@host[:port]/database`` (``postgresql://`` and
  ``postgres://`` mean the same driver);
* ``sqlite:///path/to/state.db``: a store's file (its name is always ``state.db``,
  since the folder holds the store's other files too);
* a folder, existing or not, that holds or will hold ``state.db`` (or the path of that
  ``state.db`` itself).

:attr:`CopyTarget.display` is the target with any password hidden: only it is printed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ..engine import DB_NAME
from ..engine_pg import safe_url
from ..errors import ConfigurationError

__all__ = ["CopyTarget", "parse_copy_target"]

_PG_SCHEMES = ("postgresql", "postgresql+psycopg", "postgres")
_FORMS = (
    "give a postgresql+psycopg://user@host:port/database URL, sqlite:///path/to/state.db, "
    "or a folder for state.db"
)


@dataclass(frozen=True)
class CopyTarget:
    """A parsed TARGET: ``home`` for an SQLite store, ``url`` for PostgreSQL."""

    kind: Literal["sqlite", "postgresql"]
    display: str
    home: Path | None = None
    # The URL as given, password included: handed to the open, never shown (not in repr).
    url: str | None = field(default=None, repr=False)


def parse_copy_target(target: str) -> CopyTarget:
    """Parse TARGET (see the module); :class:`ConfigurationError` names the accepted forms.

    The text is never echoed back in an error: it may hold a password.
    """
    if not target.strip():
        raise ConfigurationError(f"the copy target is empty; {_FORMS}")
    if "://" not in target:
        home = Path(os.path.expanduser(target)).absolute()
        if home.name == DB_NAME:  # the store's file rather than its folder
            home = home.parent
        elif home.exists() and not home.is_dir():
            raise ConfigurationError(
                f"{home} is a file, not a folder; give the folder that holds (or will "
                f"hold) the store's {DB_NAME}"
            )
        return CopyTarget("sqlite", display=str(home), home=home)
    try:
        url = make_url(target)
    except ArgumentError:
        # Not chained: the parser's message repeats the whole text, password included.
        raise ConfigurationError(f"the copy target is not a valid URL; {_FORMS}") from None
    except ValueError:
        # make_url's int() of the port: not chained, its text may repeat the URL.
        raise ConfigurationError(
            f"the copy target is not a valid URL (its port must be a number from 1 to "
            f"65535); {_FORMS}"
        ) from None
    shown = safe_url(url)
    if url.drivername in _PG_SCHEMES:
        if not url.database:
            raise ConfigurationError(
                f"the copy target {shown} names no database; add /DATABASE at the end"
            )
        url = url.set(drivername="postgresql+psycopg")
        return CopyTarget(
            "postgresql",
            display=safe_url(url),
            url=url.render_as_string(hide_password=False),
        )
    if url.get_backend_name() == "postgresql":
        raise ConfigurationError(
            f"the copy target {shown} names the driver {url.get_driver_name()}; the "
            "store uses psycopg 3: write postgresql+psycopg://"
        )
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ConfigurationError(
                f"the copy target {shown} names no file; give sqlite:///path/to/{DB_NAME}"
            )
        path = Path(os.path.expanduser(url.database)).absolute()
        if path.name != DB_NAME:
            raise ConfigurationError(
                f"a store's file is always named {DB_NAME} (its folder holds the store's "
                f"other files); give sqlite:///{path.parent / DB_NAME} or the folder "
                f"{path.parent}"
            )
        return CopyTarget("sqlite", display=str(path.parent), home=path.parent)
    raise ConfigurationError(f"the copy target {shown} is neither PostgreSQL nor SQLite; {_FORMS}")
