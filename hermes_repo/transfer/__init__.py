"""Transcripts in and out of a store, without the CLI.

::

    from hermes_repo import StateStore
    from hermes_repo.transfer import export_session, import_jsonl

    with StateStore.open() as store:
        report = import_jsonl(store, "sessions.jsonl")   # or store.import_jsonl(...)
        text = export_session(store, "s1", fmt="markdown")

* :func:`import_jsonl` reads the JSON Lines import format (see
  :mod:`hermes_repo.transfer.jsonl_import`), one session per unit of work, and returns
  an :class:`ImportReport`; ``progress`` is a callback for a progress bar.
* :func:`read_export` reads one session's replay as a :class:`SessionExport` (its
  ``chunks()`` stream the text); :func:`export_session` returns the text;
  :func:`write_export` writes it to a file atomically after
  :func:`refuse_store_targets` has checked that the file is no store's.
* :class:`SessionInfo` is a session's row, as :meth:`StateStore.list_sessions` and
  :meth:`StateStore.get_session` return it.

Every error is a :class:`~hermes_repo.errors.HermesRepoError` naming the cause and the
fix. The functions take the store as a :class:`~hermes_repo.core.WriteCore` (a
:class:`~hermes_repo.store.StateStore` is one, and so is its ``database``);
``TransferStore`` is that Protocol's deprecated old name, kept for one release.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:
    from .export import (
        EXPORT_FORMATS,
        ExportFormat,
        SessionExport,
        finite,
        jsonl_line,
        write_export,
    )
    from .export_read import export_session, read_export
    from .info import SessionInfo
    from .jsonl_import import ImportProgress, ImportReport, JsonlImportError, import_jsonl
    from .markdown import content_text, format_time, render_markdown
    from .targets import refuse_store_targets, store_file_problem

#: Deprecated alias of :class:`~hermes_repo.core.WriteCore`, kept for one release.
from ..core import WriteCore as TransferStore

__all__ = [
    "EXPORT_FORMATS",
    "ExportFormat",
    "ImportProgress",
    "ImportReport",
    "JsonlImportError",
    "SessionExport",
    "SessionInfo",
    "TransferStore",
    "content_text",
    "export_session",
    "finite",
    "format_time",
    "import_jsonl",
    "jsonl_line",
    "read_export",
    "refuse_store_targets",
    "render_markdown",
    "store_file_problem",
    "write_export",
]

# Imported on first use (PEP 562): the read commands export a session through
# :mod:`.export` without loading the import's machinery or the ORM the queries of
# :mod:`.catalog` are built on.
_LAZY = {
    "EXPORT_FORMATS": ".export",
    "ExportFormat": ".export",
    "SessionExport": ".export",
    "export_session": ".export_read",
    "finite": ".export",
    "jsonl_line": ".export",
    "read_export": ".export_read",
    "write_export": ".export",
    "ImportProgress": ".jsonl_import",
    "ImportReport": ".jsonl_import",
    "JsonlImportError": ".jsonl_import",
    "import_jsonl": ".jsonl_import",
    "content_text": ".markdown",
    "format_time": ".markdown",
    "render_markdown": ".markdown",
    "SessionInfo": ".info",
    "refuse_store_targets": ".targets",
    "store_file_problem": ".targets",
}


if not TYPE_CHECKING:
    __getattr__ = lazy_names(__name__, globals(), _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
