"""Every numeric option of every command is range-checked: a value out of range (past
64 bits, negative, NaN, infinite) is one usage line with exit 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from hermes_repo.cli import main
from hermes_repo.cli._numbers import FiniteFloatRange
from tests.cli.conftest import Cli


def _commands(
    cmd: click.Command, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, cmd)]
    if isinstance(cmd, click.Group):
        # Through the group's own lookup: the subcommands are imported on first use.
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, name
            found += _commands(sub, (*path, name))
    return found


def _numeric_options() -> list[tuple[tuple[str, ...], click.Command, click.Option]]:
    return [
        (path, cmd, p)
        for path, cmd in _commands(main)
        for p in cmd.params
        if isinstance(p, click.Option) and isinstance(p.type, click.types._NumberParamTypeBase)
    ]


NUMERIC = _numeric_options()


def test_the_sweep_finds_the_numeric_options() -> None:
    # Guards the sweep itself: were the walk broken, every check below would pass empty.
    found = {(" ".join(path), p.opts[0]) for path, _cmd, p in NUMERIC}
    assert {("search", "--limit"), ("sessions list", "--limit")} <= found
    assert ("pending replay", "--budget") in found


@pytest.mark.parametrize(
    ("path", "cmd", "option"), NUMERIC, ids=[f"{' '.join(p)} {o.opts[0]}" for p, _c, o in NUMERIC]
)
def test_every_numeric_option_has_both_bounds(
    path: tuple[str, ...], cmd: click.Command, option: click.Option
) -> None:
    kind = option.type
    assert isinstance(kind, (click.IntRange, click.FloatRange)), (path, option.name, kind)
    assert kind.min is not None and kind.max is not None, (path, option.name, kind)
    if isinstance(kind, click.FloatRange):
        assert isinstance(kind, FiniteFloatRange), (path, option.name)


def _out_of_range(option: click.Option) -> list[str]:
    kind = option.type
    assert isinstance(kind, (click.IntRange, click.FloatRange))
    values = ["99999999999999999999", "-99999999999999999999"]
    if isinstance(kind, click.FloatRange):
        values += ["nan", "inf", "1e400"]
    return values


@pytest.mark.parametrize(
    ("path", "cmd", "option"), NUMERIC, ids=[f"{' '.join(p)} {o.opts[0]}" for p, _c, o in NUMERIC]
)
def test_out_of_range_values_are_one_usage_line(
    home: Path, cli: Cli, path: tuple[str, ...], cmd: click.Command, option: click.Option
) -> None:
    # Required arguments get a harmless value, so the option is what gets refused.
    arguments = ["word" for p in cmd.params if isinstance(p, click.Argument) and p.required]
    for value in _out_of_range(option):
        result = cli("--home", home, *path, *arguments, option.opts[0], value)
        assert result.code == 2, (value, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        assert f"Invalid value for '{option.opts[0]}'" in result.stderr, (value, result.stderr)
