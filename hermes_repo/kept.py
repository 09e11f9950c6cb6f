"""One write connection kept checked out for the one-message append on a server.

A PostgreSQL engine pings every connection it hands out (``pool_pre_ping``): one more
round trip per checkout. For the one-message append, the transcript's hot path, that
ping cost 0.7 ms of ~6 ms (a fifth of the append). The append therefore keeps one
connection of the write engine checked out between calls and runs each append on it in
its own transaction, without the checkout and its ping, on the driver's connection
itself. A lost connection is found the optimistic way instead: the append on it fails,
the connection is dropped, and the caller replays the unit through the ordinary
(pinged) path.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

__all__ = ["BUSY", "KeptConnection"]

T = TypeVar("T")


class _Busy:
    """The kept connection was in use by another thread: take the ordinary path."""


BUSY = _Busy()
# libpq's PQTRANS_IDLE: no transaction open (psycopg is imported only on a server).
_IDLE = 0


class _CommitFailed(Exception):
    """The unit ran, its COMMIT failed: ``error`` is the driver's error, ``result`` what
    the unit returned (the caller decides whether the commit may have landed). Control flow
    between this module and the write core, which always catches it."""

    def __init__(self, result: object, error: BaseException) -> None:
        super().__init__(str(error))
        self.result = result
        self.error = error


class KeptConnection:
    """A connection of ``engine`` kept between calls, one caller at a time.

    The unit runs on the driver's own connection (psycopg's), without SQLAlchemy's
    ``Connection`` around it: that wrapper's per-statement work (execution context,
    result, transaction objects) cost more client time than the driver's own, and the
    append is four round trips the server answers in well under a millisecond each.
    """

    def __init__(self) -> None:
        self._pooled: PoolProxiedConnection | None = None
        self._lock = threading.Lock()

    def run(
        self, engine: Engine, unit: Callable[[Any], T], *, own_transaction: bool = False
    ) -> T | _Busy:
        """``unit(dbapi_connection)`` in its own transaction on the kept connection
        (checked out on first use), committed; :data:`BUSY` when another thread holds it
        (never waits). Any error rolls back, gives the connection up and propagates
        unwrapped (the driver's own error); a failed COMMIT propagates as
        :class:`_CommitFailed` (chained to the driver's error).

        With ``own_transaction`` the unit runs on the connection in autocommit mode and
        sends ``BEGIN`` and ``COMMIT`` itself (in a pipeline, with its statements: the
        driver would wait for its own ``BEGIN`` alone); a transaction it leaves open is
        rolled back."""
        if not self._lock.acquire(blocking=False):
            return BUSY
        try:
            pooled = self._pooled
            if pooled is None or pooled.dbapi_connection is None:
                pooled = self._pooled = engine.raw_connection()
            dbapi = pooled.dbapi_connection
            assert dbapi is not None  # checked just above
            if own_transaction:
                return self._own(dbapi, unit)
            try:
                try:
                    # The driver opens the transaction with the first statement.
                    result = unit(dbapi)
                except BaseException:
                    # The unit's error is what the caller needs, not a failed ROLLBACK
                    # on a connection that is gone.
                    with contextlib.suppress(Exception):
                        dbapi.rollback()
                    raise
                try:
                    dbapi.commit()
                except Exception as exc:
                    raise _CommitFailed(result, exc) from exc
                return result
            except BaseException:
                # The next call checks one out afresh (pinged): after an error the
                # state of this one (a lost server, a broken transaction) is not worth
                # trusting.
                self._drop()
                raise
        finally:
            self._lock.release()

    def _own(self, dbapi: Any, unit: Callable[[Any], T]) -> T:
        try:
            dbapi.autocommit = True  # refused by a connection that is gone: dropped below
            result = unit(dbapi)
        except BaseException:
            # The unit's error is what the caller needs, not a failed ROLLBACK.
            with contextlib.suppress(Exception):
                self._end(dbapi)
            self._drop()
            raise
        try:
            self._end(dbapi)  # a unit that handed over may leave its transaction open
        except BaseException:
            self._drop()
            raise
        return result

    @staticmethod
    def _end(dbapi: Any) -> None:
        if dbapi.info.transaction_status != _IDLE:
            dbapi.execute("ROLLBACK")
        dbapi.autocommit = False  # back as the pool handed it out

    def _drop(self) -> None:
        pooled, self._pooled = self._pooled, None
        if pooled is None:
            return
        dbapi = pooled.dbapi_connection
        if (
            dbapi is None
            or getattr(dbapi, "closed", False)
            or getattr(dbapi, "broken", False)
            or getattr(dbapi, "autocommit", False)  # an own transaction not put back
        ):
            pooled.invalidate()  # never handed out again
            return
        try:
            pooled.close()  # back to the pool, rolled back there
        except Exception:  # a dead connection may fail to close
            pooled.invalidate()

    def close(self) -> None:
        """Give the connection back to its engine (before the engine is disposed)."""
        with self._lock:
            self._drop()
