"""The package's import graph: one way down, no cycles, no imports hidden in functions
except the deliberately lazy ones.

Read from the source with ``ast`` (nothing is imported), so a new arrow that runs up a
layer or closes a circle fails here with the modules named, before it shows up as an
import-order bug. An import made inside a function (where it is allowed: see
:data:`LOADED_ON_USE`) is an arrow of the graph like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hermes_repo

ROOT = Path(hermes_repo.__file__).parent

# Every top-level module and package of hermes_repo, from the top layer down, in the
# rows of the diagram in docs/architecture.md ("Layers"). A module may import only what
# comes after it in this order (read row by row, left to right): never one before it.
# A new top-level module fails the test until it is ranked here (and drawn there).
# "hermes_repo" is the package itself: the public names it exports.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__",),
    ("integrations",),
    ("cli",),
    ("hermes_repo",),
    ("ops", "salvage"),
    ("store",),
    ("opening", "health"),
    ("maintenance",),
    ("hermes_import", "transfer", "transcript"),
    ("provenance",),
    ("database",),
    ("core",),
    ("uow", "repositories", "identity", "kept"),
    ("walcheck", "holders", "quarantine", "fileid", "sqlite_copies", "retry"),
    ("schema",),
    ("engine_pg", "engine", "backend", "homes", "sqlite_capi"),
    (
        "models",
        "codec",
        "roles",
        "arguments",
        "ids",
        "controls",
        "hints",
        "driver_errors",
        "errors",
        "deprecation",
        "lazy",
    ),
)
RANK = {name: i for i, name in enumerate(n for row in LAYERS for n in row)}


def _top(module: str) -> str:
    """The top-level module or package ``module`` belongs to (``hermes_repo`` itself for
    the package's ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


# Where an import may sit inside a function, so that a process loads a module only when
# it uses it: `hermes-repo --help` must not load SQLAlchemy, and a read must not load
# the importer. The command modules import what their commands run; anywhere else, only
# the importer of Hermes' state.db is loaded on use.
# The doctor's checks import on use what only an unusual store needs (the migrations
# and the ORM for a store off head, the replay's rules for pending spool files, the
# server's URL rules on a server), so a doctor of a sound file starts fast.
LAZY_IMPORTERS = ("hermes_repo.cli", "hermes_repo.ops.doctor")
LOADED_ON_USE = ("hermes_repo.hermes_import",)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.Module) -> list[ast.ImportFrom | ast.Import]:
    """Imports run when the module loads or when one of its functions runs (``if
    TYPE_CHECKING:`` blocks left out)."""
    found: list[ast.ImportFrom | ast.Import] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    walk(stmt)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            walk(child)

    walk(tree)
    return found


def _base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
                continue
            target = _base(name, path, node)
            subs = {f"{target}.{a.name}" for a in node.names} & mods.keys()
            deps |= subs
            if len(subs) < len(node.names) and target in mods:
                deps.add(target)
        edges[name] = deps - {name}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_arrows_it_should() -> None:
    edges = _graph()
    assert "hermes_repo.database" in edges["hermes_repo.store"]
    assert "hermes_repo.database" in edges["hermes_repo.transcript.writer"]


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_every_top_level_module_is_ranked() -> None:
    # The ranking and the package cannot drift: a new module is placed in a layer (and
    # in the diagram) before it is imported by anything; a ranked name that is gone is
    # taken out of both.
    tops = {_top(m) for m in _modules()}
    assert sorted(tops - RANK.keys()) == []
    assert sorted(RANK.keys() - tops) == []


def test_no_import_runs_up_a_layer() -> None:
    edges = _graph()
    upward = sorted(
        (a, b)
        for a, deps in edges.items()
        for b in deps
        if _top(a) != _top(b) and RANK[_top(b)] < RANK[_top(a)]
    )
    assert upward == []


def test_the_layer_check_sees_an_arrow_up() -> None:
    # Guards the check itself: the store is above the write core, the operator tools
    # above the store, and both arrows are in the graph the check reads.
    edges = _graph()
    assert RANK["store"] < RANK["database"] < RANK["errors"]
    assert RANK["ops"] < RANK["store"]
    assert "hermes_repo.store" in edges["hermes_repo.ops.replace"]
    assert RANK[_top("hermes_repo.ops.replace")] < RANK[_top("hermes_repo.store")]


def test_operations_on_a_live_store_are_not_schema_facts() -> None:
    # schema/ holds facts about the file and its schema; what needs the holder registry
    # or the journal checks (a guarded rebuild, an upgrade with its restore point) is
    # maintenance above them, so schema, holders and walcheck never form a circle.
    edges = _graph()
    reached = {
        b for a, deps in edges.items() if _top(a) == "schema" for b in deps if _top(b) != "schema"
    }
    assert not {_top(b) for b in reached} & {"holders", "walcheck", "maintenance", "quarantine"}


def test_integrations_use_only_the_public_api() -> None:
    # A framework's door is what any user could build: the names `hermes_repo` exports
    # (StateStore, its unit of work, the errors), never the write core behind them. The
    # tables (models) and the value codec are the data contract rows are written in: a
    # door with tables of its own (LangGraph's checkpoints) writes them through the
    # public unit of work in that contract.
    edges = _graph()
    reached = {
        (a, b)
        for a, deps in edges.items()
        if a.startswith("hermes_repo.integrations")
        for b in deps
        if not b.startswith("hermes_repo.integrations")
    }
    allowed = {"hermes_repo", "hermes_repo.models", "hermes_repo.codec"}
    assert {b for _, b in reached} <= allowed, sorted(reached)


def test_no_import_is_hidden_inside_a_function() -> None:
    # Except the deliberately lazy ones (LAZY_IMPORTERS, LOADED_ON_USE), which the graph
    # above sees like any other arrow.
    hidden = []
    for name, path in _modules().items():
        if name.startswith(LAZY_IMPORTERS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom):
                        targets = [_base(name, path, inner)]
                    elif isinstance(inner, ast.Import):
                        targets = [a.name for a in inner.names]
                    else:
                        continue
                    hidden += [
                        f"{name}:{inner.lineno}"
                        for t in targets
                        if t.startswith("hermes_repo") and not t.startswith(LOADED_ON_USE)
                    ]
    assert hidden == []


def test_the_lazy_imports_are_seen_by_the_graph() -> None:
    # Guards the walk: an arrow made inside a function counts for the layer checks.
    edges = _graph()
    assert "hermes_repo.hermes_import" in edges["hermes_repo.store"]
    assert "hermes_repo.store" in edges["hermes_repo.cli._state"]
