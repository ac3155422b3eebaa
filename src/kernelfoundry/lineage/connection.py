"""Choosing and opening a lineage backend from a URI.

  sqlite:///relative/path.db      a file relative to the working directory
  sqlite:////absolute/path.db     an absolute path (four slashes, as SQLAlchemy spells it)
  sqlite:///:memory:              a private in-memory store (tests, one process only)
  mongodb://host/dbname?…          MongoDB through PyMongo's AsyncMongoClient; database from the URI path,
  mongodb+srv://host/dbname?…      `kernelfoundry` when the path is empty

Must never connect to anything but what the URI names; pymongo is imported only for MongoDB URIs.
"""

from __future__ import annotations

from urllib.parse import unquote

from kernelfoundry.lineage.errors import LineageError
from kernelfoundry.lineage.repository import LineageRepository
from kernelfoundry.lineage.retention import RetentionPolicy

DEFAULT_DATABASE = "kernelfoundry"
SQLITE_PREFIX = "sqlite:///"
MONGO_SCHEMES = ("mongodb://", "mongodb+srv://")


def sqlite_path(uri: str) -> str:
    """The file path a `sqlite:///…` URI names."""
    path = unquote(uri[len(SQLITE_PREFIX) :].split("?", 1)[0])
    if not path:
        raise LineageError(
            "invalid_uri", f"SQLite URI {uri!r} names no file (write sqlite:///path/to/file.db)"
        )
    return path


def mongo_database_name(uri: str) -> str:
    """The database a MongoDB URI names in its path, or DEFAULT_DATABASE."""
    rest = uri.split("://", 1)[1].split("?", 1)[0]
    _, _, path = rest.partition("/")
    name = unquote(path.strip("/"))
    if any(ch in name for ch in '/\\. "$'):
        raise LineageError("invalid_uri", f"MongoDB URI {uri!r} names an invalid database {name!r}")
    return name or DEFAULT_DATABASE


async def open_repository(uri: str, *, retention: RetentionPolicy | None = None) -> LineageRepository:
    """The lineage repository `uri` names, with its schema and indexes in place."""
    if uri.startswith(SQLITE_PREFIX):
        from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository

        return await SqliteLineageRepository.open(sqlite_path(uri), retention=retention)
    if uri.startswith(MONGO_SCHEMES):
        from pymongo import AsyncMongoClient

        from kernelfoundry.lineage.mongo_repository import MongoLineageRepository

        name = mongo_database_name(uri)
        client: AsyncMongoClient = AsyncMongoClient(uri)
        try:
            return await MongoLineageRepository.open(client[name], retention=retention, client=client)
        except BaseException:
            await client.close()
            raise
    raise LineageError(
        "invalid_uri", f"lineage URI {uri!r} is neither sqlite:///… nor mongodb://… / mongodb+srv://…"
    )
