"""The rich half of the CLI's output: text, consoles and snippets shown escaped.

Split from :mod:`._output` (which re-exports every name here) because rich costs a
noticeable part of a start: `--version`, `--help` and the error lines need none of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text as RichText

from ..controls import control_positions, escape_controls, has_controls
from ._terminal import terminal_text

__all__ = ["Text", "snippet_text", "stderr_console", "stdout_console"]


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
