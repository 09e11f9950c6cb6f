"""What a flush of the transcript writer reports: :class:`FlushResult`, and a
:class:`Rejection` for each message that can never be stored."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FlushResult", "Rejection"]


@dataclass(frozen=True)
class Rejection:
    """A message of a flush that can never be stored: its place in the list, its uid
    (None when it is not a dict or its uid is unusable) and why."""

    index: int
    uid: str | None
    reason: str


@dataclass(frozen=True)
class FlushResult:
    """The outcome of one :meth:`TranscriptWriter.flush`.

    Counts cover the messages of the call's list that were not committed when it
    started: ``written`` are committed now; ``spooled`` are safe in a spool file (the
    pending queue, or the hold file while the database is damaged); ``unsaved`` are
    only in memory because the spool could not be written either (then ``error`` says
    both causes, and the next flush tries them again). ``error`` is None when every
    storable message reached the database. ``rejected`` messages can never be stored
    (``rejections`` says which and why); they are kept in ``<sid>.rejected.jsonl``
    and did not stop the others.
    """

    written: int
    spooled: int
    error: str | None = None
    unsaved: int = 0
    written_uids: tuple[str, ...] = ()
    spooled_uids: tuple[str, ...] = ()
    rejected: int = 0
    rejections: tuple[Rejection, ...] = ()

    @property
    def rejected_uids(self) -> tuple[str, ...]:
        """The uids of the rejected messages that have one."""
        return tuple(r.uid for r in self.rejections if r.uid is not None)

    @property
    def ok(self) -> bool:
        """True when every message of the call is committed in the database."""
        return self.error is None and not self.rejected
