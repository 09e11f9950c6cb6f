"""Whether the FTS5 indexes are live, as one store last saw them.

A damaged index is detached (the stale marker set, the sync triggers dropped) and search
answers from the rows until a rebuild. Dropping or creating the triggers changes the
schema cookie, so the state seen at a cookie holds until it changes, in every process:
each search reads the cookie (in its probe, no table read) and only a changed cookie
makes it read the marker and the triggers again.
"""

from __future__ import annotations

from ...schema import fts
from ..statements import Cursor, Db, fetch

__all__ = ["IndexLiveness"]

_TRIGGERS_SQL = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
_MARKER_SQL = "SELECT 1 FROM state_meta WHERE key = :key"


class IndexLiveness:
    """One store's view of its FTS indexes: live or not, and the cookie it was seen at."""

    __slots__ = ("_live", "_seen_at")

    def __init__(self) -> None:
        self._seen_at: int | None = None
        self._live = True

    @property
    def live_at(self) -> int | None:
        """The schema cookie at which the indexes were last seen live (None: not live,
        or not known yet)."""
        return self._seen_at if self._live else None

    def is_live(self, db: Db | Cursor, cookie: int) -> bool:
        """Whether the indexes are live at schema cookie ``cookie``; the marker and the
        triggers are read (on ``db``, in the search's own read) only when the cookie is
        not the one last seen."""
        if cookie != self._seen_at:
            marker = fetch(db, _MARKER_SQL, {"key": fts.STALE_KEY})
            names = {r[0] for r in fetch(db, _TRIGGERS_SQL, {})}
            self._live = not marker and set(fts.TRIGGER_NAMES) <= names
            self._seen_at = cookie
        return self._live

    def detached(self) -> None:
        """This process detached the indexes: not live, whatever the cookie said."""
        self._live = False
