"""The command starts without loading what it does not use.

`import hermes_repo`, the CLI module, `--version` and every `--help` load neither
SQLAlchemy, nor Alembic, nor the importer of Hermes' state.db; a read of a store at
head loads no Alembic and no importer. Each check runs in a fresh interpreter and looks
at ``sys.modules``: what is loaded is what costs CPU at start (the numbers are in
benchmarks/bench_cli_start.py; no clock is read here).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from sqlalchemy import create_engine

from hermes_repo import StateStore
from hermes_repo.cli import main
from hermes_repo.cli._lazy import LazyGroup
from hermes_repo.schema import migrate

HEAVY = ("sqlalchemy", "alembic", "hermes_repo.hermes_import")
NOT_FOR_READS = ("alembic", "hermes_repo.hermes_import")


def _loaded_after(code: str, *, watch: tuple[str, ...]) -> list[str]:
    """The modules among ``watch`` (and their submodules) that running ``code`` in a
    fresh interpreter loaded."""
    probe = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import json as _json, sys as _sys
        _watch = {watch!r}
        print(_json.dumps(sorted(
            m for m in _sys.modules if any(m == w or m.startswith(w + ".") for w in _watch)
        )))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_import_hermes_repo_loads_no_database_layer_and_no_importer() -> None:
    assert _loaded_after("import hermes_repo", watch=HEAVY) == []


def test_importing_the_cli_loads_no_database_layer_and_no_importer() -> None:
    assert _loaded_after("import hermes_repo.cli", watch=HEAVY) == []


def test_the_watch_sees_a_loaded_module() -> None:
    # Guards the probe: were it blind, every check above would pass empty.
    assert _loaded_after("from hermes_repo import StateStore", watch=HEAVY) != []


def _command_paths(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        sub = group.get_command(ctx, name)
        assert sub is not None, name
        found.append((*path, name))
        if isinstance(sub, click.Group):
            found += _command_paths(sub, (*path, name))
    return found


def test_version_and_every_help_load_no_database_layer() -> None:
    runs = [["--version"], ["--help"]] + [[*p, "--help"] for p in _command_paths(main)]
    # One interpreter for all of them, checked after each: the first command whose help
    # loads a heavy module is the one named.
    code = f"""
        import sys
        from hermes_repo.cli import main
        heavy = {HEAVY!r}
        for args in {runs!r}:
            try:
                main.main(args, prog_name="hermes-repo", standalone_mode=False)
            except SystemExit:
                pass
            loaded = [m for m in sys.modules if m.startswith(heavy)]
            if loaded:
                raise SystemExit(f"{{args}} loaded {{sorted(loaded)[:5]}}")
    """
    assert len(runs) > 20  # every command and subcommand was reached
    assert _loaded_after(code, watch=HEAVY) == []


def test_reads_of_a_store_at_head_load_neither_alembic_nor_the_importer(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        sid = uow.sessions.create(source="cli")
        uow.messages.append(sid, {"role": "user", "content": "a checkpoint of the plan"})
        uow.commit()
    code = f"""
        from hermes_repo import StateStore
        from hermes_repo.cli import main
        with StateStore.open({str(home)!r}) as store:
            assert store.list_sessions()
            assert store.search("checkpoint")
            assert store.load_conversation({sid!r}).messages
            store.health()
        for args in (
            ["sessions", "list"],
            ["sessions", "show", {sid!r}],
            ["sessions", "export", {sid!r}],
            ["search", "checkpoint"],
            ["db", "current"],
        ):
            main.main(["--home", {str(home)!r}, *args], standalone_mode=False)
    """
    assert _loaded_after(code, watch=NOT_FOR_READS) == []


#: What the read commands never load on a SQLite store at head: the ORM (the store's
#: declarative models, its open and write core), Alembic, the importer, the PostgreSQL
#: driver (the floor of their CPU, see benchmarks/bench_cli_start.py).
NOT_FOR_READ_COMMANDS = (
    "sqlalchemy.orm",
    "alembic",
    "hermes_repo.hermes_import",
    "psycopg",
    "hermes_repo.models",
    "hermes_repo.store",
    "hermes_repo.database",
)


def test_the_read_commands_load_no_orm_alembic_importer_or_server_driver(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        sid = uow.sessions.create(source="cli", title="plan")
        uow.messages.append(sid, {"role": "user", "content": "a checkpoint of the plan"})
        uow.commit()
    code = f"""
        import contextlib, io
        from hermes_repo.cli import main
        for args in (
            ["sessions", "list"],
            ["sessions", "list", "--json"],
            ["sessions", "show", {sid!r}],
            ["sessions", "show", {sid!r}, "--last", "1", "--json"],
            ["search", "checkpoint"],
            ["search", "checkpoint", "--json"],
            ["search", "checkpoint", "--page", "1"],
            ["sessions", "export", {sid!r}],
            ["sessions", "export", {sid!r}, "--format", "markdown"],
        ):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                main.main(["--home", {str(home)!r}, *args], standalone_mode=False)
            assert "checkpoint" in out.getvalue() or "plan" in out.getvalue(), args
    """
    assert _loaded_after(code, watch=NOT_FOR_READ_COMMANDS) == []


def test_listing_showing_and_exporting_load_no_sqlalchemy_at_all(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        sid = uow.sessions.create(source="cli", title="plan")
        uow.messages.append(sid, {"role": "user", "content": "a checkpoint of the plan"})
        uow.commit()
    code = f"""
        import contextlib, io
        from hermes_repo.cli import main
        for args in (
            ["sessions", "list"],
            ["sessions", "show", {sid!r}, "--json"],
            ["sessions", "export", {sid!r}, "--format", "markdown"],
        ):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                main.main(["--home", {str(home)!r}, *args], standalone_mode=False)
            assert "plan" in out.getvalue(), args
    """
    assert _loaded_after(code, watch=("sqlalchemy", "alembic", "psycopg")) == []


def test_the_head_constant_is_alembics_head() -> None:
    assert migrate.alembic_head() == migrate.HEAD_REVISION
    assert migrate.head_revision() == migrate.HEAD_REVISION


def test_the_revision_read_without_alembic_is_the_one_alembic_reads(tmp_path: Path) -> None:
    from alembic.runtime.migration import MigrationContext

    with StateStore.open(tmp_path / "home"):
        pass
    for path in (tmp_path / "home" / "state.db", tmp_path / "empty.db"):
        engine = create_engine(f"sqlite:///{path}")
        try:
            with engine.connect() as conn:
                alembic_says = MigrationContext.configure(conn).get_current_revision()
                assert migrate.current_revision(conn) == alembic_says
        finally:
            engine.dispose()
    assert alembic_says is None  # the empty file: no revision at all


def _lazy_entries() -> list[tuple[LazyGroup, str]]:
    groups = [main, main.get_command(click.Context(main), "sessions")]
    return [(g, name) for g in groups if isinstance(g, LazyGroup) for name in g.lazy_subcommands]


@pytest.mark.parametrize(("group", "name"), _lazy_entries(), ids=lambda v: getattr(v, "name", v))
def test_each_listed_summary_is_the_commands_own(group: LazyGroup, name: str) -> None:
    listed = click.Command(name, help=group.lazy_subcommands[name].summary)
    command = group.load(name)
    for width in (30, 45, 80, 200):
        assert listed.get_short_help_str(width) == command.get_short_help_str(width)


def test_the_lazy_tables_name_every_command() -> None:
    assert {name for _, name in _lazy_entries()} >= {
        "db", "doctor", "import", "pending", "search", "sessions", "snapshot", "export", "salvage",
        "recover",
    }  # fmt: skip


def test_defaults_restated_for_parsing_are_the_librarys() -> None:
    from hermes_repo.cli import _numbers, transfer
    from hermes_repo.maintenance import snapshots
    from hermes_repo.repositories import search_paging
    from hermes_repo.transfer import EXPORT_FORMATS
    from hermes_repo.transfer import copy as copy_mod

    assert _numbers.DEFAULT_KEEP == snapshots.DEFAULT_KEEP
    assert _numbers.COPY_BATCH_SIZE == copy_mod.DEFAULT_BATCH_SIZE
    assert _numbers.MAX_COPY_BATCH_SIZE == copy_mod.MAX_BATCH_SIZE
    assert _numbers.MAX_SEARCH_LIMIT == search_paging.MAX_SEARCH_LIMIT
    assert transfer.EXPORT_FORMATS == EXPORT_FORMATS


def test_every_public_name_resolves_and_is_listed() -> None:
    import hermes_repo

    for name in hermes_repo.__all__:
        assert getattr(hermes_repo, name) is not None, name
    assert set(hermes_repo.__all__) <= set(dir(hermes_repo))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        _ = hermes_repo.NoSuchName  # type: ignore[attr-defined]
