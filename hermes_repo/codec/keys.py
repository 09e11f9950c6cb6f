"""Nested-value checks: a dict key JSON would silently turn into another string is
refused, named by its path, and so is nesting deeper than :data:`MAX_DEPTH`, named with
the depth found. Every walk here is iterative: no depth raises ``RecursionError``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .checks import MAX_DEPTH, _bad, _short


def _container(value: Any) -> bool:
    cls = value.__class__
    return (
        cls is dict or cls is list or (cls is not str and isinstance(value, Mapping | list | tuple))
    )


def _check_keys(field: str, value: Any) -> None:
    """Refuse a dict key JSON would silently turn into another string (``1``, ``True``,
    ``None``, ``1.5``), naming its path, and a value nested deeper than
    :data:`MAX_DEPTH` (a structure that contains itself is named as such). Only
    containers are visited: plain values cost one type check."""
    cls = value.__class__
    if cls is not dict and cls is not list and not isinstance(value, Mapping | list | tuple):
        return
    # The common case (nothing wrong) costs one walk without building paths; the path
    # of a bad key, or the depth of a deep value, is worked out only when there is one.
    problem = _scan(value)
    if problem == "key":
        _walk_keys(field, value)
    elif problem == "deep":
        _refuse_deep(field, value)


def _scan(value: Any) -> str | None:
    """``"key"`` for a bad key, ``"deep"`` past :data:`MAX_DEPTH`, else None.

    Level by level, without a visited set: a structure that contains itself grows
    deeper at every level, so it stops at the limit (and is named by
    :func:`_refuse_deep`). A shared subtree is walked once per place it appears, as
    JSON writes it once per place.
    """
    level = [value]
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return "deep"
        below: list[Any] = []
        for node in level:
            children = node
            if isinstance(node, Mapping):
                for key in node:
                    # A key JSON would silently turn into another string.
                    if key.__class__ is not str and (isinstance(key, int | float) or key is None):
                        return "key"
                children = node.values()
            for child in children:
                cls = child.__class__
                if (
                    cls is dict
                    or cls is list
                    or (cls is not str and isinstance(child, Mapping | list | tuple))
                ):
                    below.append(child)
        level = below
    return None


def nesting_depth(value: Any) -> int | None:
    """How deeply ``value`` nests (``"x"`` 0, ``[]`` 1, ``[[1]]`` 2), or None when it
    contains itself. Iterative and linear in the distinct containers (a shared subtree
    is measured once): the error path of :func:`_check_keys`."""
    if not _container(value):
        return 0
    heights: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        children = node.values() if isinstance(node, Mapping) else node
        if done:
            on_path.discard(nid)
            below = [heights[id(c)] for c in children if _container(c)]
            heights[nid] = 1 + max(below, default=0)
            continue
        if nid in heights:
            continue
        if nid in on_path:
            return None
        on_path.add(nid)
        stack.append((node, True))
        for child in children:
            if _container(child) and id(child) not in heights:
                if id(child) in on_path:
                    return None
                stack.append((child, False))
    return heights[id(value)]


def _refuse_deep(field: str, value: Any) -> None:
    depth = nesting_depth(value)
    if depth is None:
        raise _bad(
            field,
            "cannot be stored as JSON (it contains itself: a circular reference)",
            "pass a tree of dicts and lists that does not contain itself",
        )
    raise _bad(
        field,
        f"is nested {depth} levels deep, deeper than the limit of {MAX_DEPTH}",
        f"flatten it to at most {MAX_DEPTH} levels (e.g. keep the deep part as JSON text)",
    )


def _walk_keys(field: str, value: Any) -> None:
    stack: list[tuple[str, Any]] = [(field, value)]
    # A structure that contains itself is visited once (json then names the cycle).
    seen: set[int] = set()
    while stack:
        path, node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Mapping):
            for key, child in node.items():
                if key.__class__ is not str and not isinstance(key, str):
                    if isinstance(key, int | float) or key is None:
                        raise _bad(
                            path,
                            f"holds the {type(key).__name__} key {_short(key)}, which JSON "
                            f"would turn into a string",
                            "use string keys",
                        )
                    continue  # json itself refuses it, named by _json
                if (
                    child.__class__ is dict
                    or child.__class__ is list
                    or (isinstance(child, Mapping | list | tuple) and not isinstance(child, str))
                ):
                    stack.append((f"{path}[{key!r}]", child))
        elif isinstance(node, list | tuple):
            for i, child in enumerate(node):
                if isinstance(child, Mapping | list | tuple):
                    stack.append((f"{path}[{i}]", child))
