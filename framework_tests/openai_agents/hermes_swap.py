"""pytest plugin: run the OpenAI Agents SDK's own session tests against HermesSession.

The SDK publishes its tests in its source distribution. Its session tests build
``SQLiteSession(session_id, db_path, session_settings=...)``; loaded with ``-p
hermes_swap`` before they are collected, this plugin puts :class:`SwappedSession` in
its place, so every test of the ``Session`` protocol's behaviour (the three ``Runner``
modes included) runs on a hermes store:

* ``":memory:"`` (the default) becomes a fresh store in a temporary folder, removed at
  ``close()``;
* a file path becomes a store in the folder ``<path>.hermes`` beside it, shared by every
  session open on that path (two sessions on one path see one store, as two
  ``SQLiteSession`` on one file do).

The tests that read ``SQLiteSession``'s own internals are listed in
:data:`INTERNALS`, each with its reason, and reported as skipped with it. The list was
audited against :data:`AUDITED_VERSION`; another version of the SDK is refused until the
list is audited again.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from importlib.metadata import version
from pathlib import Path
from typing import Any

import agents
import agents.memory
import pytest

from hermes_repo import StateStore
from hermes_repo.integrations.openai_agents import HermesSession

#: The SDK version whose tests the INTERNALS list was audited against.
AUDITED_VERSION = "0.24.0"

_MODULES = ("tests/memory/test_session.py", "tests/memory/test_session_limit.py")

#: Tests that exercise SQLiteSession's implementation, not the Session protocol.
INTERNALS: dict[str, str] = {
    # Its connection pool: one sqlite3 connection per worker thread, reaped and closed.
    "test_sqlite_session_close_closes_worker_thread_connections": "its per-thread connection pool",
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": (
        "its per-thread connection pool"
    ),
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": (
        "its per-thread connection pool"
    ),
    "test_sqlite_session_keeps_connections_of_live_worker_threads": (
        "its per-thread connection pool"
    ),
    # Its process-wide registry of one RLock per database file.
    "test_sqlite_session_file_lock_is_shared_across_instances": "its per-file lock registry",
    # The literal message and type: HermesSession refuses a closed session too, with
    # StoreClosedError (a HermesRepoError), add_items([]) included.
    "test_sqlite_session_closed_rejects_empty_add_items": (
        'the literal RuntimeError "SQLiteSession is closed"'
    ),
    # Corrupt JSON rows written straight into its agent_messages table. Hermes refuses
    # what JSON cannot hold before writing, so there is no such row to skip.
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": "corrupt rows in its own table",
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
        "corrupt rows in its own table"
    ),
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (
        "corrupt rows in its own table"
    ),
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (
        "corrupt rows in its own table"
    ),
    # Its tables and transactions probed or broken by hand (a raw sqlite3 probe of
    # agent_sessions, a dropped table); HermesSession refuses a non-JSON item with
    # IntegrityViolation before anything is written.
    "test_sqlite_session_failed_add_items_releases_write_lock": (
        "its agent_sessions table and a TypeError from json.dumps mid-transaction"
    ),
    "test_sqlite_session_failed_clear_session_rolls_back": "a dropped table of its own schema",
    "test_sqlite_session_failed_pop_item_releases_write_lock": "a dropped table of its own schema",
    # Its connection objects patched (a failing rollback or close, a pausing commit).
    "test_sqlite_session_rollback_failure_evicts_connection": "a patched sqlite3 connection",
    "test_sqlite_session_close_retries_quarantined_connection": "a patched sqlite3 connection",
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
        "its _get_connection patched with a pausing connection"
    ),
}


class _Stores:
    """The hermes stores behind the SDK tests' database paths, shared per path."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, tuple[StateStore, int, Path | None]] = {}

    def acquire(self, db_path: str | Path) -> tuple[str, StateStore]:
        with self._lock:
            if str(db_path) == ":memory:":
                folder = Path(tempfile.mkdtemp(prefix="hermes-memory-"))
                key = str(folder)
                self._open[key] = (StateStore.open(folder), 1, folder)
                return key, self._open[key][0]
            home = Path(db_path).expanduser().resolve()
            key = str(home.with_name(home.name + ".hermes"))
            store, count, scratch = self._open.get(key, (None, 0, None))
            if store is None:
                store = StateStore.open(key)
            self._open[key] = (store, count + 1, scratch)
            return key, store

    def release(self, key: str) -> None:
        with self._lock:
            store, count, scratch = self._open[key]
            if count > 1:
                self._open[key] = (store, count - 1, scratch)
                return
            del self._open[key]
        store.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


_stores = _Stores()
_built = 0  # sessions the SDK's tests built: none would mean the swap never happened


class SwappedSession(HermesSession):
    """``SQLiteSession``'s constructor over :class:`HermesSession`."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        global _built
        _built += 1
        self.db_path = db_path
        self._store_key, store = _stores.acquire(db_path)
        try:
            super().__init__(session_id, store, session_settings=session_settings)
        except BaseException:
            _stores.release(self._store_key)
            raise

    def close(self) -> None:
        released = self._closed
        super().close()
        if not released:
            _stores.release(self._store_key)


def pytest_configure(config: pytest.Config) -> None:
    found = version("openai-agents")
    if found != AUDITED_VERSION:
        raise pytest.UsageError(
            f"openai-agents {found} is installed; the list of tests that read SQLiteSession's "
            f"internals was audited for {AUDITED_VERSION}: audit INTERNALS in hermes_swap.py "
            "against the new tests, then set AUDITED_VERSION"
        )
    agents.SQLiteSession = SwappedSession  # type: ignore[attr-defined,misc]
    agents.memory.SQLiteSession = SwappedSession  # type: ignore[attr-defined,misc]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seen: set[str] = set()
    for item in items:
        name = item.nodeid.split("[")[0].split("::")[-1]
        seen.add(name)
        reason = INTERNALS.get(name)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"reads SQLiteSession internals: {reason}"))
    stale = sorted(set(INTERNALS) - seen)
    if stale and len(seen) > len(INTERNALS):  # a whole run, not a -k selection
        raise pytest.UsageError(
            f"INTERNALS names tests these modules no longer have: {', '.join(stale)}; "
            "audit the list again"
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _built == 0 and session.testscollected:
        # The tests ran on the SDK's own SQLiteSession: they proved nothing about ours.
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(f"HermesSession instances built by the SDK's tests: {_built}")
