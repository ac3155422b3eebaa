"""The SQLite lineage file: WAL mode, a schema version, data that survives reopening."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kernelfoundry.lineage import LineageError, RunRecord
from kernelfoundry.lineage.repository import SCHEMA_VERSION
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository

RUN = RunRecord(run_id="r1", task_name="matmul", created_at=datetime(2026, 11, 1, tzinfo=UTC))


async def test_file_is_in_wal_mode_with_the_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "lineage.db"
    repository = await SqliteLineageRepository.open(path)
    await repository.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


async def test_records_survive_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "lineage.db"
    first = await SqliteLineageRepository.open(path)
    await first.save_run(RUN)
    await first.close()
    second = await SqliteLineageRepository.open(path)
    try:
        assert await second.get_run("r1") == RUN
        assert not await second.save_run(RUN)
    finally:
        await second.close()


async def test_a_reader_opens_the_file_while_another_connection_is_writing(tmp_path: Path) -> None:
    """Opening a file at the current schema writes nothing, so it needs no write lock: a reader (the
    CLI, a test) opens the store's file in the middle of the store's write transaction."""
    path = tmp_path / "lineage.db"
    store = await SqliteLineageRepository.open(path)
    await store.save_run(RUN)
    writer = sqlite3.connect(path, isolation_level=None, timeout=0.1)
    writer.execute("BEGIN IMMEDIATE")  # the write lock, held
    writer.execute("UPDATE runs SET doc = doc WHERE run_id = 'r1'")
    try:
        reader = await SqliteLineageRepository.open(path)
        try:
            assert await reader.get_run("r1") == RUN
        finally:
            await reader.close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        await store.close()


async def test_a_file_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lineage.db"
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(LineageError) as caught:
        await SqliteLineageRepository.open(path)
    assert caught.value.reason == "schema_too_new"
    assert str(path) in caught.value.message


async def test_memory_store_works_without_a_file() -> None:
    repository = await SqliteLineageRepository.open(":memory:")
    try:
        assert await repository.save_run(RUN)
        assert [r.run_id for r in await repository.list_runs()] == ["r1"]
    finally:
        await repository.close()


async def test_closing_twice_is_harmless_and_later_calls_name_the_closed_file(tmp_path: Path) -> None:
    repository = await SqliteLineageRepository.open(tmp_path / "x.db")
    await repository.close()
    await repository.close()
    with pytest.raises(LineageError) as caught:
        await repository.get_run("r1")
    assert caught.value.reason == "repository_closed"
    assert "x.db" in caught.value.message
