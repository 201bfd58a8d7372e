"""open_store: URL forms, the PLANEXEC_STORE variable, the default file, and clear errors."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from planexec import UsageError
from planexec.errors import StoreError
from planexec.store import (
    MemoryStore,
    PostgresStore,
    Redactor,
    RunStore,
    SQLiteStore,
    default_store_path,
    open_store,
)
from tests.test_store_support import step_batch


@pytest.fixture(autouse=True)
def _no_store_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANEXEC_STORE", raising=False)


async def _works(store: RunStore) -> None:
    try:
        assert await store.append("r", step_batch("a"), expected_seq=0) == 2
        assert len(await store.read("r")) == 2
    finally:
        await store.close()


@pytest.mark.parametrize("url", ["memory://", "memory:", "MEMORY://"])
async def test_memory(url: str) -> None:
    store = open_store(url)
    assert isinstance(store, MemoryStore)
    await _works(store)


async def test_sqlite_absolute(tmp_path: Path) -> None:
    path = tmp_path / "abs.db"
    store = open_store(f"sqlite://{path}")
    assert isinstance(store, SQLiteStore)
    assert store.path == path
    await _works(store)
    assert path.exists()


async def test_sqlite_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    store = open_store("sqlite:data/rel.db")
    assert isinstance(store, SQLiteStore)
    assert store.path == Path("data/rel.db")
    await _works(store)
    assert (tmp_path / "data" / "rel.db").exists()


@pytest.mark.parametrize("form", ["{tmp}/runs.db", "runs.db", "./data/../runs.db", "~/runs.db", "C:runs.db"])
def test_a_plain_file_path_is_an_sqlite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "data").mkdir()
    text = form.format(tmp=tmp_path)
    store = open_store(text)
    assert isinstance(store, SQLiteStore)
    assert store.path == Path(text).expanduser()
    asyncio.run(_works(store))
    assert store.path.exists()
    monkeypatch.setenv("PLANEXEC_STORE", text)
    from_env = open_store()
    assert isinstance(from_env, SQLiteStore)
    assert from_env.path == store.path


@pytest.mark.parametrize("form", ["{tmp}", "{tmp}/", "data/"])
def test_a_store_path_that_names_a_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    with pytest.raises(UsageError, match="the store path is a folder"):
        open_store(form.format(tmp=tmp_path))


@pytest.mark.parametrize(
    "url",
    ["postgresql://app:s3cret@localhost:5432/runs", "postgres://app:s3cret@localhost/runs", "postgresql:///runs"],
)
def test_postgres_urls_make_a_postgres_store_without_connecting(url: str) -> None:
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    assert store.url == url
    assert "s3cret" not in repr(store)


@pytest.mark.parametrize(
    "url",
    ["mysql://app:s3cret@db/x", "sqlite://host/x.db", "sqlite:", "sqlite:///", "file:///tmp/x.db", "", "sqlite3:x.db"],
)
def test_unsupported_urls_list_the_supported_forms(url: str) -> None:
    with pytest.raises(UsageError) as caught:
        open_store(url)
    message = str(caught.value)
    for form in ("a file path", "memory://", "sqlite:///absolute/path.db", "sqlite:relative/path.db", "postgresql://"):
        assert form in message
    assert "s3cret" not in message


def test_the_environment_variable_is_used_when_no_url_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANEXEC_STORE", "memory://")
    assert isinstance(open_store(), MemoryStore)
    assert isinstance(open_store("postgresql://localhost/x"), PostgresStore), "an explicit URL wins"


async def test_the_default_is_a_sqlite_file_under_xdg_data_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    expected = tmp_path / "xdg" / "planexec" / "runs.db"
    assert default_store_path() == expected
    store = open_store()
    assert isinstance(store, SQLiteStore)
    assert store.path == expected
    assert expected.parent.is_dir(), "the folder is created"
    await _works(store)


@pytest.mark.parametrize("xdg", [None, "", "relative/dir"])
def test_the_default_falls_back_to_the_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdg: str | None
) -> None:
    if xdg is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
    monkeypatch.setenv("HOME", str(tmp_path))
    store = open_store()
    assert isinstance(store, SQLiteStore)
    assert store.path == tmp_path / ".local" / "share" / "planexec" / "runs.db"
    assert store.path.parent.is_dir()


def test_the_redactor_is_passed_on(tmp_path: Path) -> None:
    redactor = Redactor(pii=True)
    for url in ("memory://", f"sqlite://{tmp_path}/x.db", "postgresql://localhost/x"):
        store = open_store(url, redactor=redactor)
        assert getattr(store, "redactor", None) is redactor
    assert isinstance(getattr(open_store("memory://"), "redactor", None), Redactor)


def test_a_missing_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(UsageError, match=r"pip install -e '\.\[postgres\]' in a clone of planexec"):
        open_store("postgresql://localhost/x")
    with pytest.raises(UsageError, match=r"or pip install 'psycopg\[binary\]>=3\.1'"):
        PostgresStore("postgresql://localhost/x")


async def test_a_sqlite_file_that_cannot_be_opened_names_its_path(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path}/missing-folder/x.db")
    with pytest.raises(StoreError, match="missing-folder") as caught:
        await store.append("r", step_batch("a"), expected_seq=0)
    assert "unable to open database file" in str(caught.value)
    await store.close()
