"""Subcommands imported when they are used, not when the ``hermes-repo`` command starts.

Each command module imports what its commands run (SQLAlchemy, the store, the operator
tools): loading all of them made every call, ``--version`` and ``--help`` included, cost
over a second of CPU. A :class:`LazyGroup` names its subcommands by ``module:attribute``
with their one-line summary, so ``hermes-repo --help`` lists them without importing any,
and running (or asking help of) one imports that one only. ``tests/cli`` checks that each
summary is the command's own and that every name resolves.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, NamedTuple

import click

__all__ = ["LazyCommand", "LazyGroup", "deprecated_alias"]


class LazyCommand(NamedTuple):
    """Where a subcommand lives (``package.module:attribute``) and its ``--help`` summary."""

    target: str
    summary: str
    hidden: bool = False
    """Left out of ``--help`` (an old name kept as an alias)."""


class LazyGroup(click.Group):
    """A click group whose subcommands (``lazy_subcommands``) are imported on first use."""

    def __init__(
        self, *args: Any, lazy_subcommands: Mapping[str, LazyCommand] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands: dict[str, LazyCommand] = dict(lazy_subcommands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_subcommands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_subcommands:
            self.add_command(self.load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def load(self, cmd_name: str) -> click.Command:
        """Import the subcommand ``cmd_name`` names (a bug in the table fails loudly)."""
        module_name, _, attribute = self.lazy_subcommands[cmd_name].target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):  # pragma: no cover - a wrong table entry
            raise TypeError(f"{module_name}:{attribute} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own listing, except that a subcommand not yet imported is listed from
        # its summary: `--help` stays as cheap as `--version`.
        rows: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None:
                lazy = self.lazy_subcommands[name]
                command = click.Command(name, help=lazy.summary, hidden=lazy.hidden)
            if not command.hidden:
                rows.append((name, command))
        if not rows:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        with formatter.section("Commands"):
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])


def deprecated_alias(command: click.Command, old: str, new: str) -> click.Command:
    """``command`` under its old name ``old`` (``"pending recover"``), kept for one
    release: hidden from ``--help``, it warns on stderr that ``new`` replaces it, then
    runs the command itself (same options, same output, same exit status)."""
    callback = command.callback
    assert callback is not None

    def run(**kwargs: Any) -> Any:
        click.echo(
            f"warning: `hermes-repo {old}` is deprecated and will be removed in the next "
            f"release; use `hermes-repo {new}`",
            err=True,
        )
        return click.get_current_context().invoke(callback, **kwargs)

    return click.Command(
        old.rsplit(" ", 1)[-1],
        params=command.params,
        callback=run,
        help=f"Deprecated: use `hermes-repo {new}`.\n\n{command.help or ''}",
        hidden=True,
        context_settings=command.context_settings,
        epilog=command.epilog,
    )
