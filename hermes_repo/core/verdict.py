"""What a failure means: the write core's one verdict on a driver error.

Every driver error, wherever it is met (the engine's ``handle_error`` event, the
driver-cursor fast paths, the unit of work's exit, a read), is classified by one method,
:meth:`FailureVerdict.failure`, into one :class:`Failure`: its kind, whether the
canonical tables are damaged (a bare SQLITE_CORRUPT is decided by a read-only
``quick_check``) and whether the derived full-text index is. Two decisions follow, each
written once here:

* structural damage quarantines the file (:mod:`hermes_repo.quarantine`), so the write
  is not retried;
* FTS damage on a store with FTS triggers, not quarantined, is *degradable*
  (:meth:`FailureVerdict.degradable`): the executors (:mod:`.units`) detach the index
  and replay the unit without it.

:class:`FailureVerdict` is the bottom layer of :class:`~hermes_repo.database.Database`
(verdict, then :mod:`.units`, then :mod:`.driver`); it holds only what a verdict needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError

from .. import quarantine
from ..backend import Backend
from ..driver_errors import (
    SQLITE_CORRUPT,
    SQLITE_NOTADB,
    classify,
    describe,
    sqlite_code,
    translate,
)
from ..engine import Driver
from ..errors import ErrorKind, HermesRepoError, StateDbCorruptError
from ..schema import fts

__all__ = ["Failure", "FailureVerdict"]


@dataclass(frozen=True)
class Failure:
    """What one driver error means, decided once by :meth:`FailureVerdict.failure`.

    ``structural``: the canonical b-trees, schema or header are damaged (the file is
    quarantined). ``fts_damage``: the derived full-text index is damaged and the
    canonical tables are sound; ``fts_index`` is the index the error names, if any.
    ``damage`` is the SQLite error in one line. ``error`` is what leaves the API,
    raised ``from`` the driver error.
    """

    kind: ErrorKind
    structural: bool
    fts_damage: bool
    fts_index: str | None
    damage: str
    error: HermesRepoError


def _driver_error(exc: BaseException) -> BaseException | None:
    """The driver error behind ``exc`` (None for a library error that has none)."""
    err: BaseException | None = exc
    while isinstance(err, HermesRepoError):
        err = err.__cause__
    if isinstance(err, DBAPIError) and err.orig is not None:
        return err.orig
    return err


class FailureVerdict:
    """The failure verdict of one store: :meth:`failure` and :meth:`degradable`.

    The attributes are set by :class:`~hermes_repo.database.Database`'s constructor.
    """

    path: Path
    driver: Driver
    #: The database behind the store; its SQLite-only rules (quarantine, FTS detach,
    #: the cursor fast path) are asked of it, never of the dialect.
    backend: Backend
    guard: quarantine.Guard
    # The last error classified, with its verdict: the engine event classifies an error
    # first, and the unit of work and the write that see it next ask again.
    _recent: tuple[BaseException, tuple[ErrorKind, bool, bool]] | None

    def failure(self, exc: BaseException, *, action: str = "write") -> Failure:
        """Classify a failure: a driver error (raw or wrapped by SQLAlchemy) or a
        library error translated from one. Structural damage quarantines the file here;
        ``action`` names what failed in the error's message ("read", "commit", ...)."""
        cause = _driver_error(exc)
        if cause is None:  # a library error of its own (a refusal, a closed store)
            error = exc if isinstance(exc, HermesRepoError) else translate(exc, action=action)
            return Failure(classify(exc), False, False, None, str(exc), error)
        kind, structural, fts_damage = self._verdict(cause)
        damage = describe(cause)
        if isinstance(exc, HermesRepoError):
            error = exc
        elif structural:
            error = StateDbCorruptError(
                quarantine.enter(self.path, damage, self.guard.key).message()
            )
        else:
            error = translate(exc, action=action)
        index = fts.index_named_in(damage) if fts_damage else None
        return Failure(kind, structural, fts_damage, index, damage, error)

    def _verdict(self, cause: BaseException) -> tuple[ErrorKind, bool, bool]:
        recent = self._recent
        if recent is not None and recent[0] is cause:
            return recent[1]
        kind = classify(cause)
        code = sqlite_code(cause)
        structural = fts_damage = False
        if not self.backend.may_quarantine:
            pass  # a server's errors never mean a damaged store file or FTS5 index
        elif kind is ErrorKind.FTS:
            fts_damage = True
        elif kind is ErrorKind.CORRUPT and code is not None:
            if code & 0xFF == SQLITE_NOTADB:
                structural = True
            elif code & 0xFF == SQLITE_CORRUPT:
                # Ambiguous: a damaged FTS shadow page and a damaged ``messages`` page
                # raise the same code; the canonical tables' quick_check decides.
                structural = not quarantine.canonical_tables_ok(self.driver, self.path)
                fts_damage = not structural
        verdict = (kind, structural, fts_damage)
        self._recent = (cause, verdict)
        return verdict

    def _error(self, exc: BaseException, action: str) -> HermesRepoError:
        return self.failure(exc, action=action).error

    def _on_engine_error(self, ctx: ExceptionContext) -> None:
        orig = ctx.original_exception
        if isinstance(orig, HermesRepoError):  # the guard's own refusal
            return
        failure = self.failure(orig)
        if failure.structural:
            raise failure.error from orig

    def degradable(self, failure: Failure) -> bool:
        """Whether ``failure`` is FTS damage the store detaches the index for (a
        quarantined file is never degraded: no write may reach it)."""
        return failure.fts_damage and self.backend.has_fts_triggers and not self.guard.active
