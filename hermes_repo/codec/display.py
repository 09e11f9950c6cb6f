"""How a stored time and a message's content read for a person (listings, transcripts).

Kept apart from :mod:`hermes_repo.transfer` (which re-exports them): the read commands
show them without loading the import and export machinery.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

__all__ = ["content_text", "format_time"]


def format_time(epoch: float | None, *, seconds: bool = True) -> str:
    """An epoch time as local ``YYYY-MM-DD HH:MM:SS`` (``HH:MM`` without ``seconds``),
    or ``-`` when absent.

    The store refuses implausible times on write, but rows written by older versions or
    by raw SQL may hold anything (milliseconds, infinity, text): such a value is shown as
    ``invalid time <value>`` instead of failing the whole listing.
    """
    if epoch is None:
        return "-"
    try:
        when = dt.datetime.fromtimestamp(epoch)
    except (OverflowError, OSError, ValueError, TypeError):
        return f"invalid time {epoch!r}"
    return when.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def content_text(content: Any) -> str:
    """The readable text of a message's content: a string, or the parts of a list.

    Non-text parts (images, audio, files) become a bracketed placeholder naming their
    type and, for images, their URL, so a transcript shows that something was there.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict):
                kind = str(part.get("type", "part"))
                if kind == "text" or "text" in part:
                    pieces.append(str(part.get("text", "")))
                elif kind == "image_url":
                    image = part.get("image_url")
                    url = image.get("url") if isinstance(image, dict) else image
                    pieces.append(f"[image: {url}]")
                else:
                    pieces.append(f"[{kind}]")
            else:
                pieces.append(str(part))
        return "\n".join(pieces)
    return json.dumps(content, ensure_ascii=False)
