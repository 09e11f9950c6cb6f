"""Control characters shown escaped: text from the store made safe for a terminal.

Stored text is anyone's text: a chat message may hold terminal escape sequences (set the
window title with ``ESC ] 0 ; ... BEL``, write the clipboard with OSC 52, clear the
screen with ``ESC [ 2 J``, the same through the 8-bit C1 introducer U+009B) or bidi
overrides that make a line read differently than it is stored. Printed raw, a listing
or a Markdown transcript would run them in the reader's terminal. :func:`escape_controls`
writes each such character as a visible escape instead (``\\x1b``, ``\\x9b``,
``\\u202e``); everything else, line breaks and tabs included, stays as it is. JSON output
needs none of this: JSON escapes control characters itself and stays exact.
"""

from __future__ import annotations

import re

__all__ = ["control_positions", "escape_controls", "has_controls"]

# C0 controls but tab and line feed, DEL, C1 (U+0080-U+009F), the bidi embeddings and
# overrides (U+202A-U+202E) and isolates (U+2066-U+2069). A carriage return is shown
# escaped unless a line feed follows it (CRLF line ends are harmless line ends).
_CONTROLS = re.compile("\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def control_positions(text: str) -> list[int]:
    """The index of each character of ``text`` that :func:`escape_controls` escapes."""
    return [m.start() for m in _CONTROLS.finditer(text)]


def has_controls(text: str) -> bool:
    """True when :func:`escape_controls` would change ``text``."""
    return _CONTROLS.search(text) is not None


def escape_controls(text: str) -> str:
    """``text`` with each control character written as its escape (``\\x1b``, ``\\u202e``).

    Line feeds, tabs and CRLF line ends are kept. The result holds no control character,
    so escaping it again changes nothing.
    """
    if text.isprintable():  # the common case: no control, no line break
        return text
    return _CONTROLS.sub(_escape, text)
