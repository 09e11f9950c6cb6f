"""A session as a Markdown transcript, and the readable text of a message's content."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..codec import INVALID_KEY
from ..codec.display import content_text, format_time
from ..controls import escape_controls

if TYPE_CHECKING:
    from .catalog import SessionInfo

__all__ = ["content_text", "format_time", "render_markdown"]


def _fence(text: str, lang: str = "") -> str:
    """A fenced code block that survives backticks inside ``text``."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _markdown_content(content: Any) -> str:
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url")
                url = str(image.get("url") if isinstance(image, dict) else image)
                if url.startswith("data:"):
                    # An inline image would bury the transcript under base64.
                    pieces.append(f"*[inline image, {len(url)} characters of data]*")
                else:
                    pieces.append(f"![image]({url})")
            else:
                pieces.append(content_text([part]))
        return "\n\n".join(pieces)
    return content_text(content)


def render_markdown(info: SessionInfo, messages: Sequence[dict[str, Any]]) -> str:
    """A readable transcript: a title, the session's details, one heading per message.

    Text is returned as stored (a lone surrogate included: scrub it before writing it
    where only valid Unicode goes, see :func:`hermes_repo.codec.scrub`), except for
    control characters: a transcript is read in a terminal or rendered, so each one
    (terminal escape sequences, C1 controls, bidi overrides) is written as its escape,
    ``\\x1b`` or ``\\u202e`` (:func:`hermes_repo.controls.escape_controls`); line breaks
    and tabs stay. The JSONL export keeps the text exact.
    """
    out = [f"# {info.title or info.id}", ""]
    details = [f"- Session: `{info.id}`", f"- Source: {info.source}"]
    if info.model:
        details.append(f"- Model: {info.model}")
    details.append(f"- Started: {format_time(info.started_at)}")
    if info.ended_at is not None:
        reason = f" ({info.end_reason})" if info.end_reason else ""
        details.append(f"- Ended: {format_time(info.ended_at)}{reason}")
    out += [*details, ""]
    for message in messages:
        role = str(message["role"])
        heading = f"## {role.capitalize()}"
        if role == "tool":
            name = message.get("tool_name") or message.get("name")
            if name:
                heading += f" · {name}"
        invalid = message.get(INVALID_KEY)
        invalid = invalid if isinstance(invalid, dict) else {}
        when = message.get("timestamp")
        if when is None and isinstance(invalid.get("timestamp"), dict):
            when = invalid["timestamp"].get("raw")  # shown as "invalid time ..."
        heading += f" · {format_time(when)}"
        if message.get("display_only"):
            heading += " · display only"
        out += [heading, ""]
        for name, kept in invalid.items():
            # A stored value the store cannot read (see hermes_repo.codec.INVALID_KEY):
            # shown as it is stored, never dropped from the transcript.
            kept = kept if isinstance(kept, dict) else {"raw": kept}
            reason = f" ({kept['reason']})" if kept.get("reason") else ""
            out += [f"*Unreadable stored {name}{reason}:*", "", _fence(str(kept.get("raw"))), ""]
        if message.get("reasoning"):
            out += ["> " + line for line in str(message["reasoning"]).splitlines()] + [""]
        text = _markdown_content(message.get("content"))
        if role == "tool" and text:
            out += [_fence(text), ""]
        elif text:
            out += [text, ""]
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            args = fn.get("arguments", "")
            try:
                args = json.dumps(json.loads(args), ensure_ascii=False, indent=2)
            except (TypeError, ValueError, RecursionError):  # not JSON, or nested too deep
                args = str(args)
            out += [f"**Tool call** `{fn.get('name', '?')}`", "", _fence(args, "json"), ""]
    return escape_controls("\n".join(out).rstrip() + "\n")
