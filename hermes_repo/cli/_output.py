"""Output helpers shared by the CLI commands: consoles, JSON, times, errors.

Human output goes through rich; machine output (``--json``) is written with plain
``json.dumps`` because rich wraps long lines at the terminal width, which would break
the JSON a script reads.

Everything human-facing passes :func:`terminal_text`: stored text (a chat message, a
title, an id, a file name) may hold terminal escape sequences, and printed raw they would
run in the reader's terminal (retitle the window, write the clipboard, clear the screen).
They are shown escaped (``\\x1b``), lone surrogates as U+FFFD. The consoles here do it
for every text they render, and never read rich markup in a plain string (a title holding
``[link=...]`` stays text); :func:`echo` does it for plain lines; error, warning and log
lines also pass :func:`hermes_repo.engine_pg.redact`, so no password a driver's message
might repeat reaches the screen. ``--json`` output is exact (JSON escapes controls).
"""

from __future__ import annotations

import json
import re
import sys
from typing import IO, TYPE_CHECKING, Any

import click

from ..codec import escape_surrogates
from ._terminal import terminal_text

if TYPE_CHECKING:
    from ._console import Text, snippet_text, stderr_console, stdout_console

__all__ = [
    "CliError",
    "Text",
    "echo",
    "echo_json",
    "format_time",
    "json_for_terminal",
    "log_line",
    "snippet_text",
    "stderr_console",
    "stdout_console",
    "terminal_text",
    "warning_line",
]


def _secret_free(text: str) -> str:
    # Error, warning and log lines: also no password a driver's message repeated.
    # Imported here, like the other library modules below: this module is loaded by
    # every command, `--help` included, which must not load SQLAlchemy.
    from ..engine_pg import redact

    return redact(terminal_text(text))


def echo(message: str, *, err: bool = False) -> None:
    """Print one human-facing line (``click.echo``), made safe by :func:`terminal_text`."""
    click.echo(terminal_text(message), err=err)


class CliError(click.ClickException):
    """A failure reported as one line on stderr, ``error: <cause>; <fix>``, exit code 1.

    The message is flattened to one line: a script that greps stderr, and a person
    reading a log, both get the whole cause on the line that starts with ``error:``.
    """

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(_secret_free(" ".join(message.split())))

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", file=file or sys.stderr)


def warning_line(message: str) -> str:
    """The one ``warning:`` line of a library warning: one line, escaped, secret-free."""
    return f"warning: {_secret_free(' '.join(message.split()))}"


def log_line(message: str) -> str:
    """A log record's text as ``-v`` prints it: escaped and secret-free."""
    return _secret_free(message)


# Outside C0 (which json.dumps escapes): only ever inside a JSON string, where the
# \uXXXX escape means the same character.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_for_terminal(json_text: str) -> str:
    """JSON text with DEL, C1 and bidi controls written as ``\\u`` escapes: the same
    JSON value, nothing a terminal would act on (C0 is escaped by JSON itself)."""
    return _JSON_UNSAFE.sub(_json_escape, json_text)


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout; non-ASCII text (CJK) stays readable.

    A lone surrogate (stored text may hold one) is written as its ``\\udXXX`` escape,
    so the output is valid JSON and the value reads back exactly. JSON escapes the C0
    controls itself; DEL, the C1 controls (U+009B is a terminal's CSI) and the bidi
    overrides are written as ``\\u`` escapes too, so JSON printed to a terminal drives
    nothing and still reads back exactly.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, indent=2, allow_nan=False)
    except ValueError:  # a stored NaN or infinity (old rows, raw SQL): not JSON
        from ..transfer import finite

        text = json.dumps(finite(value), ensure_ascii=False, indent=2, allow_nan=False)
    click.echo(json_for_terminal(escape_surrogates(text)))


def format_time(epoch: float | None, *, seconds: bool = True) -> str:
    """:func:`hermes_repo.transfer.format_time`: an epoch time as local time, ``-`` when
    absent, ``invalid time <value>`` when implausible."""
    from ..codec.display import format_time as display_format_time

    return display_format_time(epoch, seconds=seconds)


#: The names that need rich (tables, consoles, styled text) live in :mod:`._console`,
#: loaded when a command first uses one: `--version` and `--help` never do.
_RICH = frozenset({"Text", "snippet_text", "stderr_console", "stdout_console"})


def __getattr__(name: str) -> Any:
    if name not in _RICH:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import _console

    value = getattr(_console, name)
    globals()[name] = value
    return value
