"""Options several commands share, declared once: each keeps its own help text.

A decorator here is the option as click declares it (name, flag, type); the help stays
with the command when it says what the option means there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ._numbers import LIMIT

__all__ = [
    "URL_HELP",
    "include_inactive_option",
    "json_option",
    "limit_option",
    "session_option",
]

F = TypeVar("F", bound=Callable[..., Any])

JSON_HELP = "Print machine-readable JSON."
URL_HELP = (
    "PostgreSQL database of the store, postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB "
    "(needs psycopg 3: `pip install 'psycopg[binary]>=3.2'`, or `pip install "
    "'.[postgresql]'` in a hermes_repo checkout). --home still holds the spool and "
    "other local files. [default: $HERMES_REPO_URL, else the SQLite state.db in --home; "
    "--home with HERMES_REPO_URL set is refused as ambiguous: add --url sqlite or --url URL]"
)


def json_option(help: str = JSON_HELP) -> Callable[[F], F]:
    """``--json``: machine output (passed to the command as ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def include_inactive_option(help: str) -> Callable[[F], F]:
    """``--include-inactive``: also archived audit rows (messages a repair took out)."""
    return click.option("--include-inactive", is_flag=True, help=help)


def limit_option(default: int, help: str, *, maximum: int | None = None) -> Callable[[F], F]:
    """``--limit N``: rows or hits at most, range-checked (see :mod:`._numbers`);
    ``maximum`` when the library allows fewer than :data:`LIMIT` (click then refuses
    more, naming ``--limit``, instead of the library naming its own argument)."""
    kind = LIMIT if maximum is None else click.IntRange(min=1, max=maximum)
    return click.option("--limit", type=kind, default=default, show_default=True, help=help)


def session_option(help: str) -> Callable[[F], F]:
    """``--session SID``: only this session (passed as ``session_id``)."""
    return click.option("--session", "session_id", metavar="SID", help=help)
