"""Fixtures of the lineage contract suite: one repository per backend, and a small sample of lineage.

Backends: `sqlite` always; `mongo-real` when KF_TEST_MONGO_URI names a server (each test gets its own
database, dropped afterwards), else `mongo-mongomock` (mongomock-motor's in-memory database).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from lineage_sample import RETENTION, RepositoryFactory, Sample, make_sample, store_sample

from kernelfoundry.lineage import LineageRepository
from kernelfoundry.lineage.mongo_repository import MongoLineageRepository
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository

MONGO_URI = os.environ.get("KF_TEST_MONGO_URI", "")
BACKENDS = ["sqlite", "mongo-real" if MONGO_URI else "mongo-mongomock"]


@pytest.fixture
async def open_backend(tmp_path: Path) -> AsyncIterator[RepositoryFactory]:
    """A factory opening a fresh, empty repository of the named backend; all are closed afterwards."""
    opened: list[LineageRepository] = []
    cleanups: list[Callable[[], Awaitable[object]]] = []

    async def open_one(backend: str) -> LineageRepository:
        if backend == "sqlite":
            repository: LineageRepository = await SqliteLineageRepository.open(
                tmp_path / f"lineage-{len(opened)}.db", retention=RETENTION
            )
        elif backend == "mongo-mongomock":
            from mongomock_motor import AsyncMongoMockClient

            database = AsyncMongoMockClient()[f"kf_test_{uuid.uuid4().hex}"]
            repository = await MongoLineageRepository.open(database, retention=RETENTION)
        elif backend == "mongo-real":
            from pymongo import AsyncMongoClient

            client: AsyncMongoClient = AsyncMongoClient(MONGO_URI)
            name = f"kf_test_{uuid.uuid4().hex}"
            cleanups.append(lambda: client.drop_database(name))
            repository = await MongoLineageRepository.open(client[name], retention=RETENTION, client=client)
        else:
            raise ValueError(backend)
        opened.append(repository)
        return repository

    yield open_one
    for cleanup in cleanups:
        await cleanup()
    for repository in opened:
        await repository.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def repository(backend: str, open_backend: RepositoryFactory) -> LineageRepository:
    return await open_backend(backend)


@pytest.fixture
def sample() -> Sample:
    return make_sample()


@pytest.fixture
async def stored(repository: LineageRepository, sample: Sample) -> LineageRepository:
    await store_sample(repository, sample)
    return repository
