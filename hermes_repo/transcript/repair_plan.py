"""Planning a transcript repair turn group by turn group.

:func:`plan_repair` gives the plan :func:`~hermes_repo.transcript.repair.repair_transcript`
would, repairing only the turn groups that hold a violation: on a long session with a
few violations a repairing load stays close to the cost of a plain one. The repair
rules themselves are in :mod:`hermes_repo.transcript.repair`; writing a plan back is
:mod:`hermes_repo.transcript.reconcile`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .repair import Removal, RepairPlan, SurvivorUpdate, repair_transcript, violations

__all__ = ["plan_repair"]

_TURNS: Final = ("user", "assistant")


def _is_display(message: Mapping[str, Any]) -> bool:
    return bool(message.get("display_only"))


def _starts_group(role: Any, prev: Any) -> bool:
    """Whether a replayed row of ``role`` restarts the repair walk from scratch.

    ``prev`` is the role of the replayed row before it (None: there is none). The walk
    carries two things from row to row: the role of the last surviving row (same-role
    user/assistant turns merge into it) and the call ids a tool result may answer. Both
    are reset, whatever came before, at:

    * a system row (it never merges and no tool result can answer it);
    * a user or assistant row after a user, assistant or system row of another role. The
      last survivor then has that other role too (a merged-away row went into a survivor
      of its own role), so the row cannot merge, and it sets the call ids afresh (an
      assistant) or clears them (a user).

    A tool row never starts a group: its fate depends on the turn before it.
    """
    if prev is None or role == "system":
        return True
    return role in _TURNS and prev in (*_TURNS, "system") and prev != role


def _group_of(messages: Sequence[Mapping[str, Any]], index: int) -> tuple[int, int]:
    """The turn group ``[start, end)`` holding the replayed row at ``index``.

    Found by scanning outwards from the row, so the cost is the size of the group, not
    of the transcript. Display-only rows are outside the walk; those between two groups
    go with the later one here, which changes nothing (a repair never touches them).
    """
    start = index
    j = index - 1
    while True:
        while j >= 0 and _is_display(messages[j]):
            j -= 1
        prev = messages[j].get("role") if j >= 0 else None
        if _starts_group(messages[start].get("role"), prev):
            break
        start, j = j, j - 1
    prev = messages[index].get("role")
    end = index + 1
    while end < len(messages):
        row = messages[end]
        if not _is_display(row):
            if _starts_group(row.get("role"), prev):
                break
            prev = row.get("role")
        end += 1
    return start, end


def plan_repair(
    messages: Sequence[Mapping[str, Any]],
    found: Sequence[tuple[int, str]] | None = None,
) -> RepairPlan:
    """The plan ``repair_transcript(messages).plan`` gives, repairing only what is broken.

    The transcript splits into turn groups at the rows where the repair walk restarts
    from scratch (see :func:`_starts_group`). The whole repair is then the concatenation
    of the groups' repairs, and a group without violations repairs to itself; so only
    the groups holding a violation are repaired (``repair_transcript`` copies every row
    it is given). ``found`` is ``violations(messages)`` if the caller already has it.
    """
    if found is None:
        found = violations(messages)
    updates: list[SurvivorUpdate] = []
    removals: list[Removal] = []
    done = -1  # end of the last group repaired: violations come in index order
    for index, _rule in found:
        if index < done:
            continue
        start, done = _group_of(messages, index)
        sub = repair_transcript(messages[start:done]).plan
        updates += [SurvivorUpdate(u.index + start, u.fields) for u in sub.updates]
        removals += [
            Removal(
                r.index + start,
                r.rule,
                None if r.survivor_index is None else r.survivor_index + start,
            )
            for r in sub.removals
        ]
    return RepairPlan(tuple(updates), tuple(removals))
