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
from collections.abc import Iterable
from typing import IO, Any

import click
from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text as RichText

from ..codec import escape_surrogates, scrub
from ..controls import control_positions, escape_controls, has_controls

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


def terminal_text(text: str) -> str:
    """``text`` as a terminal may show it: control characters escaped (``\\x1b``,
    ``\\x9b``, ``\\u202e``; line breaks and tabs kept), lone surrogates as U+FFFD.

    The one function every human-facing line of the CLI passes through.
    """
    return escape_controls(scrub(text))


class Text(RichText):
    """rich's :class:`~rich.text.Text` whose strings pass :func:`terminal_text`.

    rich itself drops a few controls (BEL, BS, CR...) and keeps the rest (ESC, C1):
    the commands build their text with this class, so each one is shown escaped instead.
    """

    def __init__(self, text: str = "", style: str | Style = "", **kwargs: Any) -> None:
        super().__init__(terminal_text(text), style, **kwargs)

    def append(self, text: RichText | str, style: str | Style | None = None) -> Text:
        super().append(terminal_text(text) if isinstance(text, str) else text, style)
        return self


def _secret_free(text: str) -> str:
    # Error, warning and log lines: also no password a driver's message repeated.
    # Imported here, like the other library modules below: this module is loaded by
    # every command, `--help` included, which must not load SQLAlchemy.
    from ..engine_pg import redact

    return redact(terminal_text(text))


def echo(message: str, *, err: bool = False) -> None:
    """Print one human-facing line (``click.echo``), made safe by :func:`terminal_text`."""
    click.echo(terminal_text(message), err=err)


class _SafeConsole(Console):
    """A console that shows control characters escaped in whatever it renders.

    A :class:`~rich.text.Text` is escaped before it is laid out (so a table measures
    the escaped text); any segment still holding a control character is escaped as it
    is written. Rich's own control segments (cursor moves of a progress bar) and its
    styles are not text and pass as they are.
    """

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        if isinstance(renderable, RichText) and has_controls(renderable.plain):
            renderable = _escaped_text(renderable)
        for segment in super().render(renderable, options):
            if not segment.control and has_controls(segment.text):
                segment = Segment(escape_controls(segment.text), segment.style)
            yield segment


def _escaped_text(text: RichText) -> RichText:
    """``text`` with its control characters escaped, its styles kept where they were."""
    cuts = sorted({i for at in control_positions(text.plain) for i in (at, at + 1)})
    out = text.blank_copy()
    for part in text.divide(cuts):
        if len(part) == 1 and has_controls(part.plain):
            styles = [span.style for span in part.spans]
            part = RichText(escape_controls(part.plain), style=styles[-1] if styles else "")
        out.append_text(part)
    return out


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


def stdout_console() -> Console:
    """The console for human-readable results (tables, summaries)."""
    # highlight=False: rich's automatic highlighting would recolour ids and numbers
    # at random; the tables style what matters themselves.
    # markup=False: a plain string is printed as it is; user text such as a title
    # holding "[link=...]" is never read as rich markup.
    return _SafeConsole(highlight=False, soft_wrap=False, markup=False)


def stderr_console() -> Console:
    """The console for progress and notes, so stdout carries only the result."""
    return _SafeConsole(stderr=True, highlight=False, markup=False)


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


def snippet_text(snippet: str, *, color: bool) -> Text:
    """A search snippet for a table, with the hit between ``>>>`` and ``<<<`` highlighted.

    With colour the markers are replaced by the highlight; without it (a pipe, a log)
    they are kept, since they are then the only thing that shows where the hit is.
    """
    from ..repositories.search.query import SNIPPET_CLOSE, SNIPPET_OPEN

    out = Text()
    # Snippets may span lines; a table row should not. Escaped first: str.split would
    # take a few controls (U+001C-U+001F, U+0085) for spaces and lose them.
    rest = " ".join(terminal_text(snippet).split())
    while rest:
        start = rest.find(SNIPPET_OPEN)
        end = rest.find(SNIPPET_CLOSE, start + len(SNIPPET_OPEN)) if start >= 0 else -1
        if start < 0 or end < 0:
            out.append(rest)
            break
        out.append(rest[:start])
        hit = rest[start + len(SNIPPET_OPEN) : end]
        if color:
            out.append(hit, style="bold black on yellow")
        else:
            out.append(f"{SNIPPET_OPEN}{hit}{SNIPPET_CLOSE}")
        rest = rest[end + len(SNIPPET_CLOSE) :]
    return out
