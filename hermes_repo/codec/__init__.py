"""Message dicts to rows and back, byte for byte.

A message is an OpenAI-style dict. Known keys map to columns; JSON-valued keys are stored
as compact JSON text; any other key is kept in ``extra`` so nothing the caller handed in
is dropped. Returned dicts omit keys whose value is None.

**Keys the layer writes itself** (:data:`LAYER_KEYS`: ``id``, ``session_id``,
``active``, ``archived_at``, ``archive_reason``) are kept too when a caller sends them
(``id`` is common in Anthropic and OpenAI Responses messages): ``extra`` stores them
under an escaped name, :data:`TEXT_MARK` + the key, and any caller key that itself
starts with :data:`TEXT_MARK` gets one more mark, so names never collide. A plain read
restores the caller's keys exactly. The output stays unambiguous: when the layer writes
one of these keys into a returned message (``id`` with ``with_ids=True``; ``active``,
``archived_at`` and ``archive_reason`` on an archived row) and the caller sent the same
key, that message's ``extra`` keys are returned in their stored, escaped form (the
caller's ``id`` as ``"\ufdd0id"``), so the layer's value and the caller's never mix.
``display_only`` must be a bool (or None).

**Any string is stored, lone surrogates included.** Python strings may hold lone
surrogates (``"\\ud83d"`` from a stream cut mid-emoji, ``"\\udc80"`` from
``os.fsdecode``); SQLite text and UTF-8 files cannot. No schema change is needed:

* JSON text (``tool_calls``, ``reasoning_details``, ``extra``, ``content_parts``, spool
  lines): :func:`dumps` writes non-ASCII text as UTF-8 and only a lone surrogate as the
  JSON escape ``\\udXXX``. :func:`loads` reads every such escape back as that one code
  point: a high surrogate escape followed by a low one stays two code points (our JSON
  never escapes a real astral character, so the pair can only mean two lone ones).
* ``content`` (indexed by full-text search): a string holding a lone surrogate is kept
  exactly as a JSON string in ``content_parts``, and ``content_text`` holds a searchable
  copy with each lone surrogate replaced by U+FFFD, so search finds the rest of the text.
* other text columns (``reasoning``, ``finish_reason``, ``tool_name``, ``tool_call_id``,
  ``api_content``, and the session fields): :func:`encode_text` keeps a value as it is
  unless it holds a lone surrogate or starts with :data:`TEXT_MARK` (U+FDD0, a Unicode
  noncharacter); then it stores ``TEXT_MARK`` + the value's JSON string. :func:`decode_text`
  undoes it on read. The encoding is per column, so a repair that rewrites one column
  never leaves a stale copy elsewhere.

**What cannot be stored is refused before anything is written**, with an
:class:`~hermes_repo.errors.IntegrityViolation` naming the field and the fix: a value of
the wrong type in a column (a dict as ``finish_reason``, bytes as ``reasoning``), an
integer column (``token_count``) outside SQLite's signed 64 bits, NaN or infinite numbers
inside JSON values, bytes, sets, other objects JSON cannot say, circular structures, a
value nested deeper than :data:`MAX_DEPTH` (200 levels: ``[]`` and ``{}`` count one,
text none; the error names the field, the depth found and the limit, at any depth,
never a ``RecursionError``), a non-string key anywhere in a message (JSON would silently turn
``1``, ``True`` and ``None`` into ``"1"``, ``"true"`` and ``"null"``; the error names
the key's path), a ``uid`` that is not plain text, and a timestamp
that is not plausible epoch seconds (:func:`check_timestamp`: a real number with
``0 <= t <`` :data:`MAX_TIMESTAMP`, the start of the year 3000 UTC; a millisecond epoch
is named as such). Inside JSON values integers of any size are kept (JSON text holds
them), and JSON's own rules apply: tuples come back as lists.

**A stored value the store did not write never makes a row unreadable.** Rows written
by another tool, an old version, an import or a hand edit may hold malformed JSON in a
JSON column (``tool_calls``, ``content_parts``, ``reasoning_details``, ``extra``), JSON
nested deeper than the parser follows, ``extra`` that is not a JSON object, a timestamp
that is not a number, a ``token_count`` that is not an integer, or bytes in a text
column. :func:`row_to_message` then leaves that field out and returns the message with
one more key, :data:`INVALID_KEY` (``"$invalid"``)::

    {"role": "assistant", "content": "...", "uid": "...", "timestamp": ...,
     "$invalid": {"tool_calls": {"raw": "[{bad", "reason": "not valid JSON (...)"}}}

``raw`` is the stored value exactly (text and numbers as they are; bytes, NaN and
infinities as their ``repr``), so a JSON export keeps it losslessly; ``extra`` names
the keys stored without a column, ``content`` the content columns. A caller's own
``$invalid`` key is escaped like the layer keys above. A timestamp that is a number is
returned as stored even when implausible (JSON output writes a non-finite one as
text). Only a row that fails to decode is examined: rows the store wrote cost nothing
more. ``hermes-repo doctor`` names every such value with its session, message id and
field (:mod:`hermes_repo.ops.doctor.values`).
"""

from __future__ import annotations

from .checks import MAX_DEPTH, MAX_TIMESTAMP, check_server_text, check_timestamp, short_repr
from .content import calls_text, content_columns, parts_text
from .keys import nesting_depth
from .rows import (
    INVALID_KEY,
    LAYER_KEYS,
    MESSAGE_COLUMNS,
    ROW_COLUMNS,
    invalid_reason,
    message_to_row,
    new_uid,
    raw_value,
    row_to_message,
    tool_call_count,
)
from .text import (
    TEXT_MARK,
    decode_text,
    dumps,
    encode_text,
    escape_surrogates,
    has_surrogates,
    loads,
    scrub,
)

__all__ = [
    "INVALID_KEY",
    "LAYER_KEYS",
    "MAX_DEPTH",
    "MAX_TIMESTAMP",
    "MESSAGE_COLUMNS",
    "ROW_COLUMNS",
    "TEXT_MARK",
    "calls_text",
    "check_server_text",
    "check_timestamp",
    "content_columns",
    "decode_text",
    "dumps",
    "encode_text",
    "escape_surrogates",
    "has_surrogates",
    "invalid_reason",
    "loads",
    "message_to_row",
    "nesting_depth",
    "new_uid",
    "parts_text",
    "raw_value",
    "row_to_message",
    "scrub",
    "short_repr",
    "tool_call_count",
]
