"""The store lives at exactly ``<home>/state.db``, whatever the folder is called.

A folder name is never read as part of a URL: ``?`` does not start a query string,
``#`` no fragment, ``%41`` is not decoded to ``A``. Proven with both drivers, with the
library API, and the read-only
probes (``file:`` URIs); the CLI in tests/cli/test_cli_odd_home.py.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.quarantine import canonical_tables_ok
from tests.support.stores import paths_under

# Every character that means something in a URL, a space, non-ASCII, a leading dash.
ODD_NAMES = ["a?b#c%41 d é", "q?x", "%41%2F..", "-leading dash", "#frag", "semi;colon&amp=1"]
DRIVERS = ["pysqlite3", "stdlib"]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("name", ODD_NAMES)
def test_store_file_is_exactly_state_db_inside_an_oddly_named_home(
    tmp_path: Path, name: str, driver: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    home = outside / name
    before = paths_under(outside)
    with StateStore.open(home, driver=driver) as store:  # type: ignore[arg-type]
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(source="cli")
            uow.commit()
        store.append_message(sid, {"role": "user", "content": "where am I stored?"})
        assert store.path == home / "state.db"
        assert [m["content"] for m in store.load_conversation(sid).messages] == [
            "where am I stored?"
        ]
    created = paths_under(outside) - before
    # Everything the store made is inside the home folder; nothing beside it.
    assert created, "the store created nothing at all"
    assert all(p == name or p.startswith(name + os.sep) for p in created), sorted(created)
    db = home / "state.db"
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert db.read_bytes()[:16] == b"SQLite format 3\x00"
    # Reopened by plain path, the message is there: it went to this very file.
    with StateStore.open(home, driver=driver) as store:  # type: ignore[arg-type]
        assert store.load_conversation(sid).messages[0]["content"] == "where am I stored?"


@pytest.mark.parametrize("driver", DRIVERS)
def test_read_only_probe_opens_the_store_in_an_oddly_named_home(
    tmp_path: Path, driver: str
) -> None:
    # The quarantine's quick_check probe opens the file by `file:` URI (mode=ro): with
    # the path pasted in unencoded, `?` cut it short and the probe judged another file.
    home = tmp_path / "a?b#c%41 d é"
    StateStore.open(home, driver=driver).close()  # type: ignore[arg-type]
    assert canonical_tables_ok(select_driver(driver), home / "state.db")  # type: ignore[arg-type]
    assert not (tmp_path / "a").exists()
