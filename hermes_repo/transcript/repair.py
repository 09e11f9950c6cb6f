"""Pure repair of a replayed transcript of OpenAI-style message dicts.

Providers reject transcripts that contain two user turns in a row, two assistant turns
in a row, or a tool result that does not answer a call of the assistant turn just before
it. Crashes and retries produce exactly such transcripts, so before replay the sequence
is repaired:

* consecutive assistant turns merge into the first (text, tool calls, reasoning);
* consecutive user turns merge into the first (text, or every multimodal part);
* tool results that answer no open call are dropped (orphans and duplicates).

A merge happens only when it is lossless (:func:`mergeable`): the two turns have the
same speaker, and their contents have the same shape. Speaker means every key of the
message except those a merge is defined for (:data:`MERGE_KEYS`): ``name`` in a group
chat, and any other key a caller keeps on a message. Shape means text with text (joined
with a separator), a part list with a part list (the lists concatenated: every part
kept, in order, which is what a provider does itself with two user turns of parts), or
a turn without content (None) with either. A text is never turned into a part, nor a
dict or any other value into text: content keeps its type. Two same-role turns that
cannot merge stay as they are (two speakers in a row are a valid group chat), except
an assistant turn after an assistant turn that holds tool calls: those calls must be
answered next, so that later turn leaves the replay (rule
:data:`RULE_UNMERGEABLE_ASSISTANT`; the row is archived whole, never rewritten).

The repair never invents content, never touches ``display_only`` rows (they are outside
the replayed sequence), never changes a kept message's content shape or speaker, and
never loses user text. It is pure: the caller gets the repaired list together with a
:class:`RepairPlan` that describes exactly which rows change and which leave the replay,
so a store can persist the same transformation and audit it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..codec import LAYER_KEYS, TEXT_MARK

__all__ = [
    "MERGE_KEYS",
    "RULES",
    "RULE_DUPLICATE_TOOL",
    "RULE_MERGE_ASSISTANT",
    "RULE_MERGE_USER",
    "RULE_ORPHAN_TOOL",
    "RULE_UNMERGEABLE_ASSISTANT",
    "UPDATABLE_FIELDS",
    "Removal",
    "RepairPlan",
    "RepairResult",
    "SurvivorUpdate",
    "apply_plan",
    "content_kind",
    "mergeable",
    "repair_transcript",
    "violations",
]

RULE_MERGE_ASSISTANT: Final = "merge_assistant"
"""An assistant turn merged into the assistant turn before it."""
RULE_MERGE_USER: Final = "merge_user"
"""A user turn merged into the user turn before it."""
RULE_ORPHAN_TOOL: Final = "orphan_tool_result"
"""A tool result that answers no call of the assistant turn before it."""
RULE_DUPLICATE_TOOL: Final = "duplicate_tool_result"
"""A second tool result for a call that already has one."""
RULE_UNMERGEABLE_ASSISTANT: Final = "unmergeable_assistant"
"""An assistant turn right after an assistant turn with tool calls, that cannot merge
into it (another speaker, or content of another shape): it leaves the replay whole."""
RULES: Final = (
    RULE_MERGE_ASSISTANT,
    RULE_MERGE_USER,
    RULE_ORPHAN_TOOL,
    RULE_DUPLICATE_TOOL,
    RULE_UNMERGEABLE_ASSISTANT,
)
"""Every rule name a :class:`Removal` can carry."""

UPDATABLE_FIELDS: Final = ("content", "tool_calls", "reasoning", "reasoning_details", "api_content")
"""The only keys a repair ever changes on a surviving row."""

MERGE_KEYS: Final = frozenset(
    {
        *UPDATABLE_FIELDS,
        # Per-row facts: the survivor keeps its own, the merged row keeps its own in
        # its archived row.
        "uid",
        "timestamp",
        "token_count",
        "finish_reason",
        # What a store adds to a loaded message (row id, archive state), and a
        # caller's own key of one of these names, as a load with ids returns it: a
        # per-message identity (e.g. a provider's message "id"), so whether two turns
        # merge never depends on how they were loaded.
        *LAYER_KEYS,
        *(TEXT_MARK + key for key in LAYER_KEYS),
    }
)
"""Keys a merge is defined for. Every other key (``name``, any caller key) is part of
who speaks: two turns merge only when they agree on all of them, except keys naming the
one message (``platform_message_id``, any ``..._message_id``), which differ between every
two turns as ``uid`` does."""

_MERGE_RULES: Final = {"user": RULE_MERGE_USER, "assistant": RULE_MERGE_ASSISTANT}
_TEXT_SEPARATORS: Final = {"user": "\n\n", "assistant": "\n"}


@dataclass(frozen=True)
class SurvivorUpdate:
    """New values for a row that stays in the replay but absorbed other rows."""

    index: int
    """Position of the surviving row in the input list."""
    fields: dict[str, Any]
    """Final values of the keys that change (a subset of UPDATABLE_FIELDS); None clears."""


@dataclass(frozen=True)
class Removal:
    """A row that leaves the replay, and why."""

    index: int
    """Position of the removed row in the input list."""
    rule: str
    """One of RULES."""
    survivor_index: int | None
    """Input position of the row it was merged into; None for a dropped tool result."""


@dataclass(frozen=True)
class RepairPlan:
    """The exact transformation a repair applies to its input."""

    updates: tuple[SurvivorUpdate, ...]
    removals: tuple[Removal, ...]

    @property
    def repairs(self) -> int:
        """Number of repair actions; each one removes exactly one row from the replay."""
        return len(self.removals)

    @property
    def changed(self) -> bool:
        """Whether applying the plan changes the transcript at all."""
        return bool(self.updates or self.removals)


@dataclass(frozen=True)
class RepairResult:
    """The repaired transcript and the plan that produces it from the input."""

    messages: list[dict[str, Any]]
    plan: RepairPlan


def _is_display(row: Mapping[str, Any]) -> bool:
    return bool(row.get("display_only"))


def _call_id(call: Any) -> Any:
    return call.get("id") if isinstance(call, Mapping) else None


def _call_ids(tool_calls: Any) -> set[Any]:
    if not isinstance(tool_calls, list):
        return set()
    return {cid for cid in map(_call_id, tool_calls) if cid is not None}


def _tool_rule(row: Mapping[str, Any], known: set[Any] | None, open_ids: set[Any]) -> str | None:
    """Return the rule a tool row violates, or None when it answers an open call."""
    call_id = row.get("tool_call_id")
    if known is None or call_id is None:
        return RULE_ORPHAN_TOOL
    if call_id in open_ids:
        return None
    return RULE_DUPLICATE_TOOL if call_id in known else RULE_ORPHAN_TOOL


def content_kind(content: Any) -> str:
    """The shape of a message's content: ``none``, ``text``, ``parts`` or ``other``."""
    if content is None:
        return "none"
    if isinstance(content, str):
        return "text"
    if isinstance(content, list):
        return "parts"
    return "other"


def _content_merges(kind: str, content: Any) -> bool:
    """Whether ``content`` merges into a survivor whose content has shape ``kind``."""
    other = content_kind(content)
    if other == "none":
        return True  # nothing to add: the survivor's content is left as it is
    if other == "other":
        return False  # a dict (or any other value) has no lossless join
    return kind in ("none", other)


def _same(a: Any, b: Any) -> bool:
    """Deep equality that also compares types (1, 1.0 and True are different speakers).

    Iterative: a caller's value may be nested deeper than Python's recursion limit.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list | tuple):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def _per_message(key: str) -> bool:
    """A key naming this one message where it came from (a chat gateway's
    ``platform_message_id``, any ``..._message_id``): a per-row fact like ``uid``, which
    differs between every two turns and says nothing of who speaks. The merged row keeps
    its own in its archived row."""
    return key.endswith("message_id")


def _same_speaker(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    keys = {k for k in (first.keys() | second.keys()) - MERGE_KEYS if not _per_message(k)}
    # A key holding None is the key left out: a store returns it so.
    return all(_same(first.get(k), second.get(k)) for k in keys)


def mergeable(survivor: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether ``other`` merges into ``survivor`` (the same role) without loss.

    Same speaker (every key but :data:`MERGE_KEYS` equal) and content of the same
    shape (see the module's documentation). ``survivor`` is the survivor as merged so
    far: a turn without content that absorbed text has text.
    """
    return _content_merges(content_kind(survivor.get("content")), other.get("content")) and (
        _same_speaker(survivor, other)
    )


def _merge_content(first: Any, second: Any, separator: str) -> Any:
    """The content of two turns that :func:`mergeable` allows to merge."""
    if second is None:
        return first
    if first is None:
        return copy.deepcopy(second)
    if isinstance(first, list):
        # Both part lists: every part kept, in order; the shape stays a list.
        return copy.deepcopy(first) + copy.deepcopy(second)
    texts = [t for t in (first, second) if t]
    if not texts:
        # Nothing to add: keep the survivor's own empty value rather than invent one.
        return first
    return separator.join(texts)


def _has_calls(tool_calls: Any) -> bool:
    return isinstance(tool_calls, list) and bool(tool_calls)


def _unite_calls(first: Any, second: Any) -> list[Any] | None:
    calls: list[Any] = []
    seen: set[Any] = set()
    for source in (first, second):
        if not isinstance(source, list):
            continue
        for call in source:
            cid = _call_id(call)
            if cid is not None:
                # A repeated id is the same call re-sent by a retry: the first copy is
                # the one its tool result answers.
                if cid in seen:
                    continue
                seen.add(cid)
            calls.append(copy.deepcopy(call))
    return calls or None


def _first_nonempty(first: Any, second: Any) -> Any:
    if first:
        return first
    return copy.deepcopy(second) if second else first


def _set(row: dict[str, Any], key: str, value: Any) -> None:
    # Missing means None: never add an explicit None where the key was absent, so the
    # row stays equal to the input row patched with the plan.
    if value is None and key not in row:
        return
    row[key] = value


def _merge_into(survivor: dict[str, Any], other: Mapping[str, Any], role: str) -> None:
    _set(
        survivor,
        "content",
        _merge_content(survivor.get("content"), other.get("content"), _TEXT_SEPARATORS[role]),
    )
    if role == "assistant":
        _set(
            survivor,
            "tool_calls",
            _unite_calls(survivor.get("tool_calls"), other.get("tool_calls")),
        )
        for key in ("reasoning", "reasoning_details"):
            _set(survivor, key, _first_nonempty(survivor.get(key), other.get(key)))
    # The sidecar was the exact payload of the survivor alone; after a merge it no
    # longer matches the content, and replaying it would silently drop the merged text.
    _set(survivor, "api_content", None)


def repair_transcript(messages: Sequence[Mapping[str, Any]]) -> RepairResult:
    """Repair a transcript for replay; the input is never mutated.

    A single left-to-right walk reaches the fixpoint the rules define: every merge goes
    into the last surviving row, and a dropped tool row never enters the output, so an
    assistant (or user) that follows only dropped rows merges straight away and the
    tool results after it are checked against the merged call list. Repairing the
    result again is therefore a no-op.
    """
    rows = [copy.deepcopy(dict(m)) for m in messages]
    removals: list[Removal] = []
    survivors: set[int] = set()
    last: int | None = None  # last surviving row of the replayed sequence
    known: set[Any] | None = None  # call ids of the assistant turn tool rows may answer
    open_ids: set[Any] = set()  # those of them still without a result

    for index, row in enumerate(rows):
        if _is_display(row):
            continue
        role = row.get("role")
        if role == "tool":
            rule = _tool_rule(row, known, open_ids)
            if rule is not None:
                removals.append(Removal(index, rule, None))
                continue
            open_ids.discard(row.get("tool_call_id"))
        elif role in _MERGE_RULES and last is not None and rows[last].get("role") == role:
            if mergeable(rows[last], row):
                _merge_into(rows[last], row, role)
                removals.append(Removal(index, _MERGE_RULES[role], last))
                survivors.add(last)
                if role == "assistant":
                    # No result can have been consumed yet: the survivor is the last row.
                    known = _call_ids(rows[last].get("tool_calls"))
                    open_ids = set(known)
                continue
            if role == "assistant" and _has_calls(rows[last].get("tool_calls")):
                # The survivor's calls must be answered next; this turn cannot join
                # it without loss, so it leaves the replay as it is (archived whole).
                removals.append(Removal(index, RULE_UNMERGEABLE_ASSISTANT, last))
                continue
            # Another speaker (or another content shape): a turn of its own.
            if role == "assistant":
                known = _call_ids(row.get("tool_calls"))
                open_ids = set(known)
            else:
                known = None
        elif role == "assistant":
            known = _call_ids(row.get("tool_calls"))
            open_ids = set(known)
        else:
            known = None
        last = index

    updates: list[SurvivorUpdate] = []
    for index in sorted(survivors):
        fields = {
            key: copy.deepcopy(rows[index].get(key))
            for key in UPDATABLE_FIELDS
            if rows[index].get(key) != messages[index].get(key)
        }
        if fields:
            updates.append(SurvivorUpdate(index, fields))
    removed = {r.index for r in removals}
    repaired = [row for index, row in enumerate(rows) if index not in removed]
    return RepairResult(repaired, RepairPlan(tuple(updates), tuple(removals)))


def apply_plan(messages: Sequence[Mapping[str, Any]], plan: RepairPlan) -> list[dict[str, Any]]:
    """Apply a plan to the rows it was computed from; the input is never mutated.

    This is what a store does with a persisted plan: patch the surviving rows and leave
    the removed ones out of the replay.
    """
    rows = [copy.deepcopy(dict(m)) for m in messages]
    for update in plan.updates:
        rows[update.index].update(copy.deepcopy(update.fields))
    removed = {r.index for r in plan.removals}
    return [row for index, row in enumerate(rows) if index not in removed]


def violations(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """List ``(input index, rule)`` for every violation present in the list as given.

    Read-only. Tool rows are checked against the run of consecutive assistant turns
    before them (that run is one turn once merged). Fixing a violation can expose
    another (dropping an orphan can make two users adjacent), which
    :func:`repair_transcript` fixes too; so the list is empty exactly when a repair
    would change nothing.
    """
    found: list[tuple[int, str]] = []
    last_role: Any = None
    turn: Mapping[str, Any] = {}  # the row that started the current user/assistant turn
    turn_kind = "none"  # its content's shape once merged
    turn_calls = False  # whether it holds tool calls once merged
    known: set[Any] | None = None
    open_ids: set[Any] = set()
    for index, row in enumerate(messages):
        if _is_display(row):
            continue
        role = row.get("role")
        if role == "tool":
            rule = _tool_rule(row, known, open_ids)
            if rule is None:
                open_ids.discard(row.get("tool_call_id"))
            else:
                found.append((index, rule))
            last_role = role
            continue
        if role in _MERGE_RULES and role == last_role:
            if _content_merges(turn_kind, row.get("content")) and _same_speaker(turn, row):
                found.append((index, _MERGE_RULES[role]))
                if turn_kind == "none":
                    turn_kind = content_kind(row.get("content"))
                if role == "assistant" and known is not None:
                    # Same as the repair: later duplicates of an id add nothing.
                    fresh = _call_ids(row.get("tool_calls")) - known
                    known |= fresh
                    open_ids |= fresh
                    turn_calls = turn_calls or _has_calls(row.get("tool_calls"))
                continue
            if role == "assistant" and turn_calls:
                found.append((index, RULE_UNMERGEABLE_ASSISTANT))
                continue
        if role in _MERGE_RULES:
            turn, turn_kind = row, content_kind(row.get("content"))
            turn_calls = _has_calls(row.get("tool_calls"))
        if role == "assistant":
            known = _call_ids(row.get("tool_calls"))
            open_ids = set(known)
        else:
            known = None
        last_role = role
    return found
