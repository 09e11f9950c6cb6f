"""What a search returns: :class:`SearchHit`, built fast, and the merge of two hit lists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .query import like_snippet

__all__ = ["WINDOW_CHARS", "SearchHit", "like_hit", "merge_hits", "row_hit"]

# Characters of context read around a LIKE hit's first term (the snippet is cut from it).
WINDOW_CHARS = 120


@dataclass(frozen=True)
class SearchHit:
    """One matching message. ``snippet`` marks the hit with >>> and <<<."""

    message_id: int
    session_id: str
    role: str
    snippet: str
    #: Epoch seconds; None when the stored value is not a number (a row written by
    #: another tool or edited by hand: ``hermes-repo doctor`` names it).
    timestamp: float | None


_new = object.__new__
_set = object.__setattr__


def row_hit(r: Any) -> SearchHit:
    """A hit from an (id, session, role, snippet, timestamp) row.

    The frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``:
    for 20 hits that cost more than the pool checkout of a search. One ``__dict__`` set
    builds the same object (equal, hashed and immutable alike).
    """
    hit = _new(SearchHit)
    _set(
        hit,
        "__dict__",
        {
            "message_id": int(r[0]),
            "session_id": r[1],
            "role": r[2],
            "snippet": r[3] or "",
            "timestamp": r[4] if r[4].__class__ is float else _time(r[4]),
        },
    )
    return hit


def _time(stored: Any) -> float | None:
    """A stored timestamp that is not a float: an integer as a float; anything else (text
    or bytes that another tool or a hand edit left there) as None, so one such row never
    fails a search (``hermes-repo doctor`` names it)."""
    if isinstance(stored, int | float) and not isinstance(stored, bool):
        return float(stored)
    return None


def like_hit(r: Any, terms: list[str]) -> SearchHit:
    """A hit of a LIKE route from an (id, session, role, window start, window, text
    length, timestamp) row: the snippet is cut from the window around the first term,
    with an ellipsis where the text goes on."""
    window, begin, total = r[4] or "", int(r[3] or 1), int(r[5] or 0)
    snippet = like_snippet(window, terms)
    if begin > 1 and not snippet.startswith("…"):
        snippet = "…" + snippet
    if begin - 1 + len(window) < total and not snippet.endswith("…"):
        snippet += "…"
    return SearchHit(int(r[0]), r[1], r[2], snippet, float(r[6]))


def merge_hits(
    hits: list[SearchHit], more: list[SearchHit], limit: int, *, by_recency: bool = False
) -> list[SearchHit]:
    """Add the hits of the rows beyond an index's cap that the index did not return.

    Newest first when both lists are (trigram, LIKE); after the ranked ones otherwise.
    """
    seen = {h.message_id for h in hits}
    extra = [h for h in more if h.message_id not in seen]
    if not extra:
        return hits
    merged = hits + extra
    if by_recency:
        merged.sort(key=lambda h: h.message_id, reverse=True)
    return merged[:limit]
