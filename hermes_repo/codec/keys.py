"""Nested-key checks: a dict key JSON would silently turn into another string is refused,
named by its path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .checks import _bad, _short


def _check_keys(field: str, value: Any) -> None:
    """Refuse a dict key JSON would silently turn into another string (``1``, ``True``,
    ``None``, ``1.5``), naming its path. Only containers are visited: plain values cost
    one type check."""
    cls = value.__class__
    if cls is not dict and cls is not list and not isinstance(value, Mapping | list | tuple):
        return
    # The common case (no bad key) costs one walk without building paths; the path
    # of a bad key is worked out only when there is one.
    if _bad_key_inside(value):
        _walk_keys(field, value)


def _bad_key_inside(value: Any) -> bool:
    stack = [value]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        children = node
        if isinstance(node, Mapping):
            for key in node:
                # A key JSON would silently turn into another string.
                if key.__class__ is not str and (isinstance(key, int | float) or key is None):
                    return True
            children = node.values()
        for child in children:
            cls = child.__class__
            if (
                cls is dict
                or cls is list
                or (cls is not str and isinstance(child, Mapping | list | tuple))
            ):
                stack.append(child)
    return False


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
