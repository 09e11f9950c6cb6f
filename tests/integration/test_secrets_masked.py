"""A password never leaves the library in any text: reprs, URLs, errors, log records.

Before: a password given as ``?password=`` (libpq and SQLAlchemy take it) was shown by
``repr(store.engine)``, the store's location, every connection error and the doctor's
report; only the userinfo password was masked.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_repo import HermesRepoError, StateStore
from hermes_repo.engine_pg import redact, resolve_url, safe_url, split_secrets
from hermes_repo.maintenance.sqlite_only import libpq_url
from hermes_repo.ops.doctor import diagnose_server
from hermes_repo.ops.server_schema import check_server, server_revision
from hermes_repo.transfer.copy import copy_store, describe_endpoint
from hermes_repo.transfer.copy_target import parse_copy_target
from tests.support.pg import PgServer
from tests.support.secrets import PASSWORD, SecretRole, leaks, secret_role

FORMS = ("userinfo", "query", "sslpassword", "conninfo", "everywhere")


@pytest.fixture
def role(pg_server: PgServer, pg_template: str) -> Iterator[SecretRole]:
    with secret_role(pg_server, pg_template) as made:
        yield made


def _error_texts(exc: BaseException) -> list[str]:
    """The error, every error it was raised from, and the whole printed traceback."""
    texts = ["".join(traceback.format_exception(exc))]
    seen: BaseException | None = exc
    while seen is not None:
        texts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    return texts


@pytest.mark.parametrize("form", FORMS)
def test_an_open_store_shows_no_password_anywhere(
    role: SecretRole, tmp_path: Path, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = role.forms()[form]
    caplog.set_level(logging.DEBUG)
    target = resolve_url(url)
    assert target is not None
    with StateStore.open(tmp_path / "home", url=url) as store:
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(source="cli", title="t")
            uow.commit()
        store.append_message(sid, {"role": "user", "content": "hello"})
        assert store.load_conversation(sid).messages[0]["content"] == "hello"
        seen = [
            repr(store),
            repr(store.engine),
            str(store.engine.url),
            store.engine.url.render_as_string(hide_password=False),  # holds none at all
            repr(store.engine.pool),
            store.path,
            store.database.location,
            repr(store.health()),
            repr(target),
            str(target),
            safe_url(target.url),
            libpq_url(target),
            repr(split_secrets(target.url)[0]),
        ]
    revision = server_revision(target)
    report = diagnose_server(tmp_path / "home", target)
    seen += [repr(revision), json.dumps(revision.as_dict()), json.dumps(report.to_dict())]
    seen += [repr(report), check_server(target)]
    assert leaks(*seen) == []
    assert leaks(caplog.text) == []


def test_connection_errors_name_the_store_without_its_password(
    role: SecretRole, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    for url in (role.unknown_database(), role.closed_port()):
        with pytest.raises(HermesRepoError) as caught:
            StateStore.open(tmp_path / "home", url=url, write_budget_s=0.2)
        texts += _error_texts(caught.value)
        target = resolve_url(url)
        assert target is not None
        for call in (server_revision, check_server):
            with pytest.raises(HermesRepoError) as again:
                call(target)
            texts += _error_texts(again.value)
    assert f"{role.role}:***@" in texts[0]  # the store is named, as safe_url shows it
    assert leaks(*texts, caplog.text) == []


@pytest.mark.parametrize(
    "bad",
    [
        f"postgresql+psycopg://u:{PASSWORD}@h:notaport/db",
        f"postgresql+psycopg://u@h/db?password={PASSWORD}&port=x",
        f"mysql://u:{PASSWORD}@h/db?password={PASSWORD}",
        f"postgresql+psycopg://u@h/?password={PASSWORD}",
        f"sqlite:///x.db?password={PASSWORD}",
    ],
)
def test_a_refused_url_is_named_without_its_password(bad: str, tmp_path: Path) -> None:
    texts: list[str] = []
    for call in (
        lambda: resolve_url(bad),
        lambda: StateStore.open(tmp_path / "home", url=bad, write_budget_s=0.2),
        lambda: parse_copy_target(bad),
    ):
        try:
            call()
        except Exception as exc:  # a raw error is another defect; here only its text counts
            texts += _error_texts(exc)
    assert texts  # at least one refusal
    assert leaks(*texts) == []


def test_a_copy_to_a_server_names_both_ends_without_the_password(
    role: SecretRole, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    source_home = tmp_path / "source"
    with StateStore.open(source_home, url="sqlite") as source:
        with source.unit_of_work() as uow:
            sid = uow.sessions.create(source="cli")
            uow.commit()
        source.append_message(sid, {"role": "user", "content": "x"})
        target = parse_copy_target(role.forms()["everywhere"])
        with StateStore.open(tmp_path / "home", url=target.url, replay=False) as dst:
            report = copy_store(source, dst)
            seen = [target.display, repr(target), describe_endpoint(dst), repr(dst.engine)]
    seen += [json.dumps(report.as_dict()), repr(report)]
    assert report.messages.inserted == 1
    assert leaks(*seen, caplog.text) == []


def test_redact_hides_every_secret_seen_and_pgpassword(monkeypatch: pytest.MonkeyPatch) -> None:
    resolve_url(f"postgresql+psycopg://u@h/db?conninfo=password%3D{PASSWORD}x")
    assert PASSWORD + "x" not in redact(f"driver said: password={PASSWORD}x")
    monkeypatch.setenv("PGPASSWORD", "an-env-secret-42")
    assert redact("FATAL: an-env-secret-42 rejected") == "FATAL: *** rejected"
    assert redact("pw") == "pw"  # nothing to hide: unchanged
