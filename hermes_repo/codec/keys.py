"""Nested-value checks: a dict key JSON would silently turn into another string is
refused, named by its path, and so is nesting deeper than :data:`MAX_DEPTH`, named with
the depth found. Every walk here is iterative: no depth raises ``RecursionError``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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
    on_path = {id(value)}
    # Each entry: a container on the current path, its children still to visit, and
    # the greatest height of its children so far.
    path: list[tuple[Any, Iterator[Any], int]] = [(value, _children(value), 0)]
    while path:
        node, todo, best = path[-1]
        for child in todo:
            cls = child.__class__
            if cls is str or cls is int or cls is float or child is None or cls is bool:
                continue
            if not _container(child):
                continue
            cid = id(child)
            known = heights.get(cid)
            if known is not None:
                best = max(best, known)
                continue
            if cid in on_path:
                return None
            path[-1] = (node, todo, best)
            on_path.add(cid)
            path.append((child, _children(child), 0))
            break
        else:
            path.pop()
            on_path.discard(id(node))
            height = heights[id(node)] = best + 1
            if path:
                parent, rest, most = path[-1]
                if height > most:
                    path[-1] = (parent, rest, height)
    return heights[id(value)]


def _children(node: Any) -> Iterator[Any]:
    return iter(node.values() if isinstance(node, Mapping) else node)


def _tree_depth(value: Any) -> int | None:
    """The depth of ``value`` level by level, or None as soon as a container shows up a
    second time (shared, or containing itself: :func:`nesting_depth` then decides).
    Cheaper than :func:`nesting_depth` on the common case, a tree."""
    seen: set[int] = set()
    level = [value]
    depth = 0
    while level:
        depth += 1
        below: list[Any] = []
        for node in level:
            for child in node.values() if isinstance(node, Mapping) else node:
                if _container(child):
                    if id(child) in seen:
                        return None
                    seen.add(id(child))
                    below.append(child)
        level = below
    return depth


def _refuse_deep(field: str, value: Any) -> None:
    depth = _tree_depth(value)
    if depth is None:
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
