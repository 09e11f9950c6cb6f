"""The ``hermes-repo`` command: operate a hermes_repo session store from a shell.

``main`` is the click group. It owns ``--home``, a :class:`CliState` that opens the store
only when a command needs it (so ``--help`` and ``db`` commands never open it) and closes
it at exit, and the one error boundary that turns every library, OS and migration error
into a single ``error: <cause>; <fix>`` line on stderr with exit code 1 (usage errors
exit with 2, as click does).

Commands live in one module per area and are registered in the explicit table below,
by name: a command's module is imported only when that command runs or shows its help
(see :mod:`._lazy`), so ``--version`` and ``--help`` load neither SQLAlchemy nor the
store.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import click

from .. import __version__
from ..driver_errors import translate
from ..engine import select_driver
from ..errors import HermesRepoError
from ._lazy import LazyCommand, LazyGroup
from ._options import URL_HELP
from ._output import CliError, terminal_text, warning_line
from ._state import CliState

__all__ = ["CliError", "CliState", "main"]


def _loaded_error(module: str, name: str) -> tuple[type[Exception], ...]:
    # An exception of a library can only be raised once that library is loaded, so its
    # class is looked up, never imported: the error boundary costs nothing at start.
    loaded = sys.modules.get(module)
    error = getattr(loaded, name, None) if loaded is not None else None
    return (error,) if isinstance(error, type) and issubclass(error, Exception) else ()


def _database_errors() -> tuple[type[Exception], ...]:
    # SQLAlchemy's wrapper, and raw DB-API errors (not wrapped by SQLAlchemy) that escape
    # from the backup API and from raw connections: every driver's base class is caught
    # so none becomes a traceback.
    return (
        sqlite3.Error,
        *_loaded_error("sqlalchemy.exc", "DBAPIError"),
        *_loaded_error("pysqlite3.dbapi2", "Error"),
        *_loaded_error("psycopg", "Error"),
    )


def _migration_errors() -> tuple[type[Exception], ...]:
    return _loaded_error("alembic.util.exc", "CommandError")


def _one_line_cause(exc: BaseException) -> str:
    """The ``<cause>; <fix>`` text for an error the CLI reports instead of a traceback."""
    if isinstance(exc, HermesRepoError):
        return str(exc)
    if isinstance(exc, _database_errors()):
        return str(translate(exc, action="database access"))
    if isinstance(exc, _migration_errors()):
        return f"migration failed: {exc}; run `hermes-repo db current` to see the revision"
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}:{where}; check the path, its permissions and free space"
    return str(exc)


def _reported_errors() -> tuple[type[Exception], ...]:
    """What the CLI reports as one line; anything else is a bug and keeps its traceback."""
    return (HermesRepoError, OSError, *_database_errors(), *_migration_errors())


# Registration is an explicit table: a new command adds one entry here, with the summary
# `hermes-repo --help` lists (a test checks it is the command's own first line).
_COMMANDS: dict[str, LazyCommand] = {
    "db": LazyCommand(
        "hermes_repo.cli.db:db",
        "Schema migrations (upgrade, revision, drift check), installing a recovered file,\n"
        "and copying the store to PostgreSQL or another SQLite file.",
    ),
    "doctor": LazyCommand(
        "hermes_repo.cli.doctor:doctor_command",
        "Check the store without writing to it; exit 1 when something needs fixing.",
    ),
    "import": LazyCommand(
        "hermes_repo.cli.transfer:import_command",
        "Import sessions and messages from a Hermes Agent state.db or a JSON Lines FILE.",
    ),
    "pending": LazyCommand(
        "hermes_repo.cli.pending:pending",
        "Transcripts spooled while the database could not take them.",
    ),
    "search": LazyCommand(
        "hermes_repo.cli.search:search_command",
        "Search message text; every word of QUERY must match.",
    ),
    "sessions": LazyCommand(
        "hermes_repo.cli.sessions:sessions",
        "List, show and export the sessions in the store.",
    ),
    "snapshot": LazyCommand(
        "hermes_repo.cli.snapshot:snapshot",
        "Take, list and restore snapshots of state.db (in <home>/state-snapshots/).",
    ),
}


class _HermesGroup(LazyGroup):
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
        except click.ClickException as exc:
            # A usage error repeats the value it refuses, which may hold control
            # characters (a session id pasted from stored text): shown escaped.
            # (setattr: click types the attribute Final, yet show() reads it back.)
            setattr(exc, "message", terminal_text(exc.message))  # noqa: B010
            raise
        except Exception as exc:
            if not isinstance(exc, _reported_errors()):
                raise
            raise CliError(_one_line_cause(exc)) from exc
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
    lazy_subcommands=_COMMANDS,
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
