"""``db replace NEW.db``: a recovered store is installed without meeting the old ``-wal``.

The scenario is the operator's, followed literally: a store is quarantined (its ``-wal``
kept on purpose, holding committed frames), ``sessions repair`` refuses and names the
salvage and the replace commands, the operator runs exactly those, and ends with a
healthy store while the damaged set is kept aside. The hand copy the old message
invited (the new file over ``state.db``, the ``-wal`` left beside it) is shown to damage
the new file: that is why the command exists.
"""

from __future__ import annotations

import shlex
import shutil
import stat
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.ops.replace import ReplaceError, replace_store
from tests.cli.conftest import run_cli_from_root
from tests.support import damage
from tests.support.holding import held_by_another_process, opened_by_plain_sqlite
from tests.support.incidents import PER_SESSION, advised_commands, quarantined_mid_write
from tests.support.stores import new_session

MODULE = select_driver().module
WAL = select_driver().journal_mode == "WAL"


def test_following_the_repair_advice_literally_ends_with_a_healthy_store(home: Path) -> None:
    db = quarantined_mid_write(home)
    old_digests = {
        s: damage.file_digest(Path(f"{db}{s}"))
        for s in ("", "-wal", "-journal")
        if Path(f"{db}{s}").exists()
    }

    refused = run_cli_from_root("--home", home, "sessions", "repair")
    assert refused.code == 1
    advice = advised_commands(refused.stderr)
    [recover_cmd] = [c for c in advice if "--output" in c]
    [replace_cmd] = [c for c in advice if " db replace " in c]
    assert "place of the old" in refused.stderr

    recovered = run_cli_from_root(*shlex.split(recover_cmd)[1:])
    assert recovered.code == 0, recovered.stderr
    assert "db replace" in recovered.stdout
    replaced = run_cli_from_root(*shlex.split(replace_cmd)[1:])
    assert replaced.code == 0, replaced.stderr

    doctor = run_cli_from_root("--home", home, "doctor")
    assert doctor.code == 0, doctor.stdout + doctor.stderr
    assert run_cli_from_root("--home", home, "db", "check").code == 0
    with StateStore.open(home) as store:
        with store.unit_of_work() as uow:
            assert all(uow.sessions.exists(s) for s in ("early", "late", "in-the-wal"))
        assert len(store.load_conversation("late").messages) == PER_SESSION
        assert len(store.load_conversation("in-the-wal").messages) == 50
    [aside] = home.glob("state.db.replaced-*[0-9TZ]")
    for suffix, digest in old_digests.items():
        kept = Path(f"{aside}{suffix}")
        assert damage.file_digest(kept) == digest  # the damaged set, byte for byte
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert not list(home.glob(".state.db.replace-*"))  # no staged copy left behind


def test_copying_over_state_db_by_hand_lets_the_old_wal_damage_the_new_file(
    home: Path, tmp_path: Path
) -> None:
    """Why the command exists: the naive install the old message invited fails."""
    if not WAL:
        pytest.skip("only a kept -wal is replayed into a new file (WAL mode)")
    db = quarantined_mid_write(home)
    out = tmp_path / "recovered" / "state.db"
    assert run_cli_from_root("sessions", "salvage", "--source", db, "--output", out).code == 0
    shutil.copyfile(out, db)  # the -wal of the damaged file stays beside it
    con = MODULE.connect(str(db))
    try:
        verdict = [r[0] for r in con.execute("PRAGMA integrity_check").fetchall()]
    except MODULE.DatabaseError as exc:
        verdict = [str(exc)]
    finally:
        con.close()
    assert verdict != ["ok"]


def test_replace_refuses_while_another_process_holds_the_store(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "state.db"
    out.parent.mkdir()
    shutil.copyfile(home / "state.db", out)
    before = damage.file_digest(home / "state.db")
    with held_by_another_process(home, tmp_path / "signals") as holder:
        result = run_cli_from_root("--home", home, "db", "replace", out)
        assert result.code == 1
        [line] = result.error_lines
        assert line.startswith("error: ") and f"pid {holder.pid}" in line
        assert "nothing was replaced" in line
        assert damage.file_digest(home / "state.db") == before
        assert not list(home.glob("state.db.replaced-*"))


def test_replace_refuses_while_a_plain_sqlite_connection_has_the_store_open(
    home: Path, tmp_path: Path
) -> None:
    """A program using SQLite without this library (a shell, a script) is seen too."""
    if not WAL:
        pytest.skip("a rollback-journal connection holds no lock between transactions")
    out = tmp_path / "new" / "state.db"
    out.parent.mkdir()
    shutil.copyfile(home / "state.db", out)
    with opened_by_plain_sqlite(home / "state.db", tmp_path / "signals") as holder:
        with pytest.raises(ReplaceError, match=f"pid {holder.pid}.*nothing was replaced"):
            replace_store(home, out)
        assert not list(home.glob("state.db.replaced-*"))


def test_replace_refuses_a_file_that_is_not_a_sound_store(home: Path, tmp_path: Path) -> None:
    before = damage.file_digest(home / "state.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(ReplaceError, match="not an SQLite database"):
        replace_store(home, junk)
    damaged = tmp_path / "damaged" / "state.db"
    damaged.parent.mkdir()
    with StateStore.open(damaged.parent) as store:
        sid = new_session(store)
        for i in range(50):
            store.append_message(sid, {"role": "user", "content": f"{i} " + "x " * 200})
    damage.checkpoint_and_close(damaged, module=MODULE)
    damage.damage_first_leaf(damaged, "messages", module=MODULE)
    with pytest.raises(ReplaceError, match=r"integrity_check|fails to open"):
        replace_store(home, damaged)
    with pytest.raises(ReplaceError, match="store's own file"):
        replace_store(home, home / "state.db")
    assert damage.file_digest(home / "state.db") == before
    assert not list(home.glob("state.db.replaced-*"))
    assert not list(home.glob(".state.db.replace-*"))
