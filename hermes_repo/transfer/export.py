"""Export one session's replay as JSON Lines or Markdown: :func:`read_export`.

The export is the replay: active messages in order (archived audit rows are left
out). JSON Lines has one message a line, exactly as
:meth:`StateStore.load_conversation` returns it (uid and timestamp included);
Markdown is a readable transcript (:func:`~hermes_repo.transfer.markdown.render_markdown`).
"""

from __future__ import annotations

import errno
import math
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from ..codec import dumps, scrub
from ..errors import ConfigurationError, HermesRepoError, StorageFullError
from .markdown import render_markdown
from .targets import refuse_store_targets

if TYPE_CHECKING:
    from .catalog import SessionInfo

__all__ = [
    "EXPORT_FORMATS",
    "ExportFormat",
    "SessionExport",
    "finite",
    "jsonl_line",
    "write_export",
]

ExportFormat = Literal["jsonl", "markdown"]
#: The formats an export writes, in the order the CLI offers them.
EXPORT_FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)
# errnos that mean the storage refused the bytes, not the path.
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def finite(value: Any) -> Any:
    """``value`` with each NaN or infinite float as its repr string (``"inf"``,
    ``"-inf"``, ``"nan"``), and bytes (a blob another tool stored in a text column) as
    their repr: JSON output never holds ``Infinity`` or ``NaN`` and never fails. Only
    used once a strict write has failed, so the common output pays nothing."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return repr(bytes(value))
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def jsonl_line(message: dict[str, Any]) -> str:
    """One message as its export line (no newline).

    A lone surrogate is written as its ``\\udXXX`` escape, so the line is the message;
    a stored NaN or infinity (old rows, raw SQL) as its repr string, and so are bytes.
    """
    try:
        return dumps(message, strict=True)
    except (ValueError, TypeError):
        return dumps(finite(message), strict=True)


@dataclass(frozen=True)
class SessionExport:
    """One session read for export: its row, its replay, and the format to write."""

    session: SessionInfo
    messages: list[dict[str, Any]]
    fmt: ExportFormat = "jsonl"

    def chunks(self) -> Iterator[str]:
        """The export text piece by piece: a line per message for JSON Lines, the whole
        transcript for Markdown (a lone surrogate shows as U+FFFD there: it is for
        people, and must not fail the write)."""
        if self.fmt == "jsonl":
            for message in self.messages:
                yield jsonl_line(message) + "\n"
        else:
            yield scrub(render_markdown(self.session, self.messages))

    def text(self) -> str:
        """The whole export as one string."""
        return "".join(self.chunks())


def _write_failed(output: Path, exc: OSError) -> HermesRepoError:
    cause = exc.strerror or str(exc)
    if exc.errno in _FULL_ERRNOS:
        return StorageFullError(
            f"cannot write the export {output}: {cause} (left as it was); free space on "
            "its disk or choose another file for -o, then export again"
        )
    return ConfigurationError(
        f"cannot write {output}: {cause}; check that its folder exists and is writable"
    )


def write_export(export: SessionExport, output: Path, *, home: Path) -> None:
    """Write ``export`` to ``output`` atomically, mode 0600 (transcripts are private).

    ``home`` is the exported store's folder: ``output`` is first checked with
    :func:`~hermes_repo.transfer.targets.refuse_store_targets` (again, if the caller
    already did, since the target may have appeared meanwhile). The text goes to a new
    temporary file beside ``output`` (0600, ``O_EXCL``, never through a symlink), is
    fsynced, and only then renamed over ``output``: a failure or an interruption
    part-way leaves ``output`` as it was and no temporary file.
    """
    refuse_store_targets(output, home)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o600)
    except OSError as exc:
        # Name the file the user asked for, not the temporary one beside it.
        raise _write_failed(output, exc) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for chunk in export.chunks():
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, output)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _write_failed(output, exc) from exc
        raise
