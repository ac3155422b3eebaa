"""Choosing a backend by URI: SQLite paths, MongoDB database names, refusals naming the URI."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.lineage import LineageError, open_repository
from kernelfoundry.lineage.connection import mongo_database_name, sqlite_path
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository


def test_sqlite_uri_with_three_slashes_is_relative_and_four_absolute() -> None:
    assert sqlite_path("sqlite:///state/lineage.db") == "state/lineage.db"
    assert sqlite_path("sqlite:////var/lib/kf/lineage.db") == "/var/lib/kf/lineage.db"
    assert sqlite_path("sqlite:///:memory:") == ":memory:"


def test_sqlite_uri_without_a_file_is_refused() -> None:
    with pytest.raises(LineageError) as caught:
        sqlite_path("sqlite:///")
    assert caught.value.reason == "invalid_uri"


@pytest.mark.parametrize(
    ("uri", "name"),
    [
        ("mongodb://localhost:27017", "kernelfoundry"),
        ("mongodb://localhost:27017/", "kernelfoundry"),
        ("mongodb://u:p@h1,h2/lineage?replicaSet=rs0", "lineage"),
        ("mongodb+srv://cluster.example.net/kf_prod?retryWrites=true", "kf_prod"),
        ("mongodb://h/?authSource=admin", "kernelfoundry"),
    ],
)
def test_mongo_database_comes_from_the_uri_path_or_the_default(uri: str, name: str) -> None:
    assert mongo_database_name(uri) == name


def test_an_invalid_mongo_database_name_is_refused() -> None:
    with pytest.raises(LineageError, match="invalid database"):
        mongo_database_name("mongodb://h/a.b")


async def test_an_unknown_scheme_is_refused_naming_the_uri() -> None:
    with pytest.raises(LineageError) as caught:
        await open_repository("postgres://h/db")
    assert caught.value.reason == "invalid_uri"
    assert "postgres://h/db" in caught.value.message


async def test_sqlite_uri_opens_a_file_repository(tmp_path: Path) -> None:
    target = tmp_path / "state" / "lineage.db"
    repository = await open_repository(f"sqlite:///{target}")
    try:
        assert isinstance(repository, SqliteLineageRepository)
        assert target.exists()
    finally:
        await repository.close()


async def test_mongo_uri_goes_through_pymongo_async_client() -> None:
    from pymongo.errors import ServerSelectionTimeoutError

    # nothing listens on port 1 of the loopback: the client must be PyMongo's and give up quickly
    with pytest.raises(ServerSelectionTimeoutError):
        await open_repository("mongodb://127.0.0.1:1/kf?serverSelectionTimeoutMS=100&connectTimeoutMS=100")
