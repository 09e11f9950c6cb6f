"""`hermes-repo import` of a Hermes Agent state.db, then `hermes-repo search`: a word only
in a tool call's arguments of a turn that also holds text is found, as Hermes' own
search (hermes-agent 0.19.0) finds it in the same file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.repositories.search import SNIPPET_CLOSE, SNIPPET_OPEN
from tests.cli.conftest import Cli

pytestmark = pytest.mark.usefixtures("backend")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hermes"


def _marked(word: str) -> str:
    return f"{SNIPPET_OPEN}{word}{SNIPPET_CLOSE}"


# fixture files (written by Hermes' own store code): ``-printf`` in a `find` command and
# the ``toolsets`` of a delegate_task call.
ARGUMENT_WORDS = ("printf", "toolsets")


@pytest.mark.parametrize("fixture", ["hermes_state_v16-5e01a5d.db", "hermes_state_v6-aebf322.db"])
def test_after_hermes_import_words_only_in_arguments_are_found_as_hermes_finds_them(
    cli: Cli, home: Path, tmp_path: Path, fixture: str
) -> None:
    hermes_state = pytest.importorskip(
        "hermes_state",
        reason="hermes-agent is not installed: pip install --no-deps hermes-agent==0.19.0",
    )
    src = tmp_path / "import" / "state.db"
    src.parent.mkdir()
    shutil.copyfile(FIXTURES / fixture, src)
    # Hermes' own search, on a copy of its own (opening it upgrades the file in place).
    theirs = tmp_path / "hermes" / "state.db"
    theirs.parent.mkdir()
    shutil.copyfile(FIXTURES / fixture, theirs)
    hermes = hermes_state.SessionDB(db_path=theirs)
    try:
        expected = {
            w: sorted((m["session_id"], m["role"]) for m in hermes.search_messages(w))
            for w in ARGUMENT_WORDS
        }
    finally:
        hermes.close()
    assert all(expected.values()), expected

    done = cli("--home", home, "import", src)
    assert done.code == 0, done.stderr

    for word in ARGUMENT_WORDS:
        found = cli("--home", home, "search", word, "--json")
        assert found.code == 0, found.stderr
        hits = json.loads(found.stdout)["hits"]
        assert sorted((h["session_id"], h["role"]) for h in hits) == expected[word], word
        assert all(_marked(word) in h["snippet"] for h in hits), hits
    with StateStore.open(home) as store:
        (hit,) = store.search("printf")
        turn = next(
            m
            for m in store.load_conversation(hit.session_id, with_ids=True).messages
            if m["id"] == hit.message_id
        )
    assert turn["content"] and "printf" not in turn["content"]  # only in the arguments
