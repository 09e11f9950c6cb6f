"""The ``hermes-repo`` command: operate a hermes_repo session store from a shell.

``main`` is the click group. It owns ``--home``, a :class:`CliState` that opens the store
only when a command needs it (so ``--help`` and ``db`` commands never open it) and closes
it at exit, and the one error boundary that turns every library, OS and migration error
into a single ``error: <cause>; <fix>`` line on stderr with exit code 1 (usage errors
exit with 2, as click does).

Commands live in one module per area and are registered in the explicit lists below.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import click
from alembic.util.exc import CommandError as AlembicCommandError
from sqlalchemy.exc import DBAPIError

from .. import __version__
from ..engine import select_driver
from ..errors import HermesRepoError, translate
from ._options import URL_HELP
from ._output import CliError, terminal_text, warning_line
from ._state import CliState

# Aliased so that `hermes_repo.cli.db` and `hermes_repo.cli.sessions` stay the modules.
from .db import db as db_group
from .doctor import doctor_command
from .pending import pending as pending_group
from .recover import recover_command
from .search import search_command
from .sessions import sessions as sessions_group
from .snapshot import snapshot as snapshot_group
from .transfer import export_command, import_command

__all__ = ["CliError", "CliState", "main"]


def _driver_errors() -> tuple[type[Exception], ...]:
    # Raw DB-API errors (not wrapped by SQLAlchemy) escape from the backup API and from
    # raw connections; every driver's base class is caught so none becomes a traceback.
    errors: list[type[Exception]] = [sqlite3.Error]
    try:
        import pysqlite3.dbapi2 as pysqlite3_dbapi
    except ImportError:
        pass
    else:
        errors.append(pysqlite3_dbapi.Error)
    try:
        import psycopg
    except ImportError:
        pass
    else:
        errors.append(psycopg.Error)
    return tuple(errors)


_DRIVER_ERRORS = _driver_errors()


def _one_line_cause(exc: BaseException) -> str:
    """The ``<cause>; <fix>`` text for an error the CLI reports instead of a traceback."""
    if isinstance(exc, HermesRepoError):
        return str(exc)
    if isinstance(exc, (DBAPIError, *_DRIVER_ERRORS)):
        return str(translate(exc, action="database access"))
    if isinstance(exc, AlembicCommandError):
        return f"migration failed: {exc}; run `hermes-repo db current` to see the revision"
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}:{where}; check the path, its permissions and free space"
    return str(exc)


# What the CLI reports as one line; anything else is a bug and keeps its traceback.
_REPORTED_ERRORS: tuple[type[Exception], ...] = (
    HermesRepoError,
    DBAPIError,
    AlembicCommandError,
    OSError,
    *_DRIVER_ERRORS,
)


class _HermesGroup(click.Group):
    """The root group: the single place where failures become one-line errors."""

    def invoke(self, ctx: click.Context) -> Any:
        failed = True
        try:
            result = super().invoke(ctx)
            failed = False
            return result
        except BrokenPipeError:
            # `hermes-repo sessions list | head`: the reader left; that is not an error
            # worth a message. Point stdout at /dev/null so the interpreter's final
            # flush does not raise again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise click.exceptions.Exit(1) from None
        except _REPORTED_ERRORS as exc:
            raise CliError(_one_line_cause(exc)) from exc
        except click.ClickException as exc:
            # A usage error repeats the value it refuses, which may hold control
            # characters (a session id pasted from stored text): shown escaped.
            # (setattr: click types the attribute Final, yet show() reads it back.)
            setattr(exc, "message", terminal_text(exc.message))  # noqa: B010
            raise
        finally:
            state = ctx.obj
            if isinstance(state, CliState):
                try:
                    state.close()
                except HermesRepoError as exc:  # pragma: no cover - close rarely fails
                    failed = True
                    raise CliError(_one_line_cause(exc)) from exc
                finally:
                    state.finish(failed=failed)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    try:
        driver = select_driver()
    except HermesRepoError as exc:
        raise CliError(str(exc)) from exc
    fix = "yes" if driver.has_wal_reset_fix else "no"
    click.echo(
        f"hermes-repo {__version__}; SQLite {driver.sqlite_version} via {driver.name} "
        f"(WAL-reset fix: {fix}, journal_mode {driver.journal_mode.lower()})"
    )
    ctx.exit(0)


def _home_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    # Path("") is Path("."): an empty --home (an unset variable in a script) would
    # silently make a store in the current folder.
    if value is None:
        return None
    if not value:
        raise click.BadParameter(
            "is empty; give the folder that holds state.db (or leave --home out to use "
            "$HERMES_HOME/hermes-repo, else ~/.hermes/hermes-repo)",
            ctx,
            param,
        )
    return Path(value)


@click.group(
    cls=_HermesGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--home",
    type=click.Path(file_okay=False),
    default=None,
    callback=_home_option,
    metavar="DIR",
    help=(
        "Folder holding the store's state.db. [default: $HERMES_HOME/hermes-repo, else "
        "~/.hermes/hermes-repo; a store of ours already at $HERMES_HOME/state.db keeps "
        "being used there]"
    ),
)
@click.option(
    "--url",
    default=None,
    envvar="HERMES_REPO_URL",
    show_envvar=False,
    metavar="URL",
    help=URL_HELP,
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and which SQLite the store uses, then exit.",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Log what the library does (INFO and up) on stderr as it happens.",
)
@click.pass_context
def main(ctx: click.Context, home: Path | None, url: str | None, verbose: bool) -> None:
    """Operate a hermes_repo session store (state.db) from the shell.

    Migrate the schema, import and export transcripts, list and search sessions.
    Read commands take --json for scripts. Failures print one line,
    `error: <cause>; <fix>`, and exit with 1 (2 for a usage error).

    \b
    Example:
      hermes-repo --home ~/.hermes/hermes-repo db upgrade
      hermes-repo import samples/sample_sessions.jsonl
      hermes-repo search "checkpoint" --limit 5
    """
    _refuse_ambiguous_store(ctx, home, url)
    _warn_unknown_settings()
    ctx.obj = CliState(home, url=url or None, verbose=verbose)


#: Every HERMES_REPO_* variable the command or the library reads.
_SETTINGS = ("HERMES_REPO_DRIVER", "HERMES_REPO_JOURNAL_MODE", "HERMES_REPO_URL")


def _warn_unknown_settings() -> None:
    """A HERMES_REPO_* variable nothing reads is most likely a typo of one that is read
    (its value then silently does nothing): named in a warning, with the known names."""
    for name in sorted(os.environ):
        if name.startswith("HERMES_REPO_") and name not in _SETTINGS:
            click.echo(
                warning_line(
                    f"{name} is set but hermes-repo reads no such setting, so it does "
                    f"nothing; the settings are {', '.join(_SETTINGS)}"
                ),
                err=True,
            )


def _refuse_ambiguous_store(ctx: click.Context, home: Path | None, url: str | None) -> None:
    """An explicit --home names a SQLite store; HERMES_REPO_URL (from the environment,
    not this command line) names a server's. Which one the user meant cannot be told,
    and the wrong guess copies or reads the wrong store with exit 0: refused."""
    from_env = ctx.get_parameter_source("url") is click.core.ParameterSource.ENVIRONMENT
    if home is None or not from_env or not (url or "").strip() or url == "sqlite":
        return
    raise click.UsageError(
        f"--home {terminal_text(str(home))} names a SQLite store folder but HERMES_REPO_URL "
        "is set and names a PostgreSQL store; say which one: add --url sqlite for the "
        'SQLite store in --home, --url "$HERMES_REPO_URL" for the server (--home then '
        "holds its spool and local files), or unset HERMES_REPO_URL",
        ctx,
    )


# Registration is an explicit list: a new command module adds one entry here.
_COMMANDS: tuple[click.Command, ...] = (
    db_group,
    sessions_group,
    import_command,
    search_command,
    pending_group,
    snapshot_group,
    doctor_command,
)
# Subcommands of `sessions` that live in other modules (export lives with import).
_SESSION_COMMANDS: tuple[click.Command, ...] = (export_command, recover_command)

for _command in _COMMANDS:
    main.add_command(_command)
for _command in _SESSION_COMMANDS:
    sessions_group.add_command(_command)
