"""The one function every human-facing line of the CLI passes through.

Its own module so that both halves of the output (:mod:`._output`, loaded at every
start, and :mod:`._console`, loaded with rich when a command prints a table) use it.
"""

from __future__ import annotations

from ..codec import scrub
from ..controls import escape_controls

__all__ = ["terminal_text"]


def terminal_text(text: str) -> str:
    """``text`` as a terminal may show it: control characters escaped (``\\x1b``,
    ``\\x9b``, ``\\u202e``; line breaks and tabs kept), lone surrogates as U+FFFD.

    The one function every human-facing line of the CLI passes through.
    """
    return escape_controls(scrub(text))
