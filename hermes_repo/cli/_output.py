"""Output helpers shared by the CLI commands: consoles, JSON, times, errors.

Human output goes through rich; machine output (``--json``) is written with plain
``json.dumps`` because rich wraps long lines at the terminal width, which would break
the JSON a script reads.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any

import click
from rich.console import Console
from rich.text import Text

from ..codec import escape_surrogates
from ..repositories.search import SNIPPET_CLOSE, SNIPPET_OPEN
from ..transfer import finite, format_time

__all__ = [
    "CliError",
    "echo_json",
    "finite",
    "format_time",
    "snippet_text",
    "stderr_console",
    "stdout_console",
]


class CliError(click.ClickException):
    """A failure reported as one line on stderr, ``error: <cause>; <fix>``, exit code 1.

    The message is flattened to one line: a script that greps stderr, and a person
    reading a log, both get the whole cause on the line that starts with ``error:``.
    """

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", file=file or sys.stderr)


def stdout_console() -> Console:
    """The console for human-readable results (tables, summaries)."""
    # highlight=False: rich's automatic highlighting would recolour ids and numbers
    # at random; the tables style what matters themselves.
    return Console(highlight=False, soft_wrap=False)


def stderr_console() -> Console:
    """The console for progress and notes, so stdout carries only the result."""
    return Console(stderr=True, highlight=False)


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout; non-ASCII text (CJK) stays readable.

    A lone surrogate (stored text may hold one) is written as its ``\\udXXX`` escape,
    so the output is valid JSON and the value reads back exactly.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, indent=2, allow_nan=False)
    except ValueError:  # a stored NaN or infinity (old rows, raw SQL): not JSON
        text = json.dumps(finite(value), ensure_ascii=False, indent=2, allow_nan=False)
    click.echo(escape_surrogates(text))


def snippet_text(snippet: str, *, color: bool) -> Text:
    """A search snippet for a table, with the hit between ``>>>`` and ``<<<`` highlighted.

    With colour the markers are replaced by the highlight; without it (a pipe, a log)
    they are kept, since they are then the only thing that shows where the hit is.
    """
    out = Text()
    rest = " ".join(snippet.split())  # snippets may span lines; a table row should not
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
