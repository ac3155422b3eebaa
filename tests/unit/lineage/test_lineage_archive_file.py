"""The run archive file: refusals with a reason, odd candidate ids, and nothing written from a bad file."""

from __future__ import annotations

import io
import json
import tarfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kernelfoundry.lineage import CandidateRecord, LineageError, RunRecord, export_run, import_run
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository

AT = datetime(2026, 11, 1, tzinfo=UTC)


async def open_memory() -> SqliteLineageRepository:
    return await SqliteLineageRepository.open(":memory:")


def write_tar(path: Path, members: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


async def test_exporting_an_unknown_run_names_it(tmp_path: Path) -> None:
    repository = await open_memory()
    with pytest.raises(LineageError) as caught:
        await export_run(repository, "run-x", tmp_path / "x.tar.gz")
    assert (caught.value.reason, "run-x" in caught.value.message) == ("run_not_found", True)
    await repository.close()


async def test_a_file_that_is_not_an_archive_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "junk.tar.gz"
    path.write_bytes(b"not a tarball at all")
    repository = await open_memory()
    with pytest.raises(LineageError) as caught:
        await import_run(repository, path)
    assert caught.value.reason == "corrupt_archive"
    await repository.close()


async def test_an_archive_of_another_format_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.tar.gz"
    write_tar(
        path, {"manifest.json": json.dumps({"format": "kernelfoundry-lineage-run", "format_version": 99})}
    )
    repository = await open_memory()
    with pytest.raises(LineageError) as caught:
        await import_run(repository, path)
    assert caught.value.reason == "unsupported_format"
    assert "99" in caught.value.message
    await repository.close()


async def test_an_archive_missing_a_member_writes_nothing(tmp_path: Path) -> None:
    source = await open_memory()
    await source.save_run(RunRecord(run_id="run-r", task_name="t", hardware="cpu.x86_64", created_at=AT))
    await source.save_candidate(CandidateRecord(candidate_id="c", run_id="run-r", code="x", created_at=AT))
    whole = tmp_path / "whole.tar.gz"
    await export_run(source, "run-r", whole)
    with tarfile.open(whole) as tar:
        members = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}
    del members["kernels/c.cpp"]
    broken = tmp_path / "broken.tar.gz"
    write_tar(broken, members)

    target = await open_memory()
    with pytest.raises(LineageError) as caught:
        await import_run(target, broken)
    assert caught.value.reason == "corrupt_archive"
    assert "kernels/c.cpp" in caught.value.message
    assert await target.get_run("run-r") is None
    await source.close()
    await target.close()


async def test_candidate_ids_unfit_for_file_names_export_as_safe_names_and_import_refuses_them(
    tmp_path: Path,
) -> None:
    source = await open_memory()
    await source.save_run(RunRecord(run_id="run-r", task_name="t", hardware="cpu.x86_64", created_at=AT))
    odd = ["../../etc/passwd", "a/b", "a_b", ".hidden"]
    for i, cid in enumerate(odd):
        await source.save_candidate(
            CandidateRecord(candidate_id=cid, run_id="run-r", code=f"// {i}", created_at=AT)
        )
    path = tmp_path / "r.tar.gz"
    await export_run(source, "run-r", path)
    with tarfile.open(path) as tar:
        kernel_files = [n for n in tar.getnames() if n.startswith("kernels/")]
    assert all(".." not in n and n.count("/") == 1 for n in kernel_files)
    assert len(set(kernel_files)) == len(odd)

    target = await open_memory()
    with pytest.raises(LineageError) as caught:
        await import_run(target, path)
    assert caught.value.reason == "invalid_archive"
    assert "is not a candidate id" in caught.value.message
    assert await target.get_run("run-r") is None
    assert await target.candidates_of_run("run-r") == []
    await source.close()
    await target.close()
