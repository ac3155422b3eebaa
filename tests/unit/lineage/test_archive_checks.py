"""Import checks an archive as a whole before writing: ids, statuses, hardware, consistency, size."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from datetime import UTC, datetime

import pytest

from kernelfoundry.lineage import BuildRecord, CandidateRecord, EvaluationRecord, LineageError, RunRecord
from kernelfoundry.lineage.export import expand, export_run_bytes, import_run_bytes, read_archive_bytes
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository

AT = datetime(2026, 11, 1, tzinfo=UTC)


async def archive(status: str = "finished", hardware: str = "cpu.x86_64", run_id: str = "run-abc") -> bytes:
    repo = await SqliteLineageRepository.open(":memory:")
    await repo.save_run(
        RunRecord(run_id=run_id, task_name="t", hardware=hardware, status=status, created_at=AT)
    )
    await repo.save_candidate(
        CandidateRecord(candidate_id=f"{run_id}-c0", run_id=run_id, code="x", created_at=AT)
    )
    await repo.save_evaluation(
        EvaluationRecord(
            candidate_id=f"{run_id}-c0",
            run_id=run_id,
            hardware=hardware or "cpu.x86_64",
            correct=True,
            evaluated_at=AT,
        )
    )
    data, _ = await export_run_bytes(repo, run_id)
    await repo.close()
    return data


def rewrite(data: bytes, member: str, change) -> bytes:  # type: ignore[no-untyped-def]
    """The archive with one member's text passed through `change`."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as source,
        tarfile.open(fileobj=out, mode="w:gz") as tar,
    ):
        for info in source.getmembers():
            text = source.extractfile(info).read().decode()  # type: ignore[union-attr]
            if info.name == member:
                text = change(text)
            body = text.encode()
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


def reason_of(data: bytes) -> tuple[str, str]:
    with pytest.raises(LineageError) as caught:
        read_archive_bytes(data)
    return caught.value.reason, caught.value.message


async def test_a_finished_run_imports_as_it_is_and_an_unfinished_one_as_stopped() -> None:
    assert read_archive_bytes(await archive("finished")).run.status == "finished"
    assert read_archive_bytes(await archive("failed")).run.status == "failed"
    assert read_archive_bytes(await archive("running")).run.status == "stopped"


def test_a_gzip_bomb_stops_at_the_cap() -> None:
    bomb = gzip.compress(bytes(10 * 1024 * 1024))
    with pytest.raises(LineageError) as caught:
        expand(bomb, max_bytes=1024 * 1024)
    assert caught.value.reason == "archive_too_large"
    assert len(expand(bomb, max_bytes=10 * 1024 * 1024)) == 10 * 1024 * 1024


async def test_empty_hardware_is_refused() -> None:
    assert reason_of(await archive(hardware="")) == (
        "invalid_archive",
        "run.json: hardware '' is not a hardware name such as cpu.x86_64",
    )


async def test_a_record_of_another_run_is_refused() -> None:
    data = rewrite(await archive(), "evaluations.jsonl", lambda t: t.replace('"run-abc"', '"run-other"'))
    reason, message = reason_of(data)
    assert reason == "invalid_archive" and "evaluations.jsonl" in message and "run-other" in message


async def test_an_evaluation_of_a_candidate_the_archive_lacks_is_refused() -> None:
    data = rewrite(await archive(), "evaluations.jsonl", lambda t: t.replace("run-abc-c0", "run-abc-c9"))
    reason, message = reason_of(data)
    assert reason == "invalid_archive" and "run-abc-c9" in message


async def test_counts_that_disagree_with_the_manifest_are_refused() -> None:
    def change(text: str) -> str:
        manifest = json.loads(text)
        manifest["counts"]["candidates"] = 5
        return json.dumps(manifest)

    reason, message = reason_of(rewrite(await archive(), "manifest.json", change))
    assert reason == "invalid_archive" and "candidates" in message


async def test_a_run_id_that_is_a_path_is_refused_without_echoing_it() -> None:
    reason, message = reason_of(await archive(run_id="/etc/passwd"))
    assert reason == "invalid_archive" and "/etc" not in message


async def test_an_import_cut_short_leaves_no_run_and_importing_again_completes_it() -> None:
    data = await archive()
    target = await SqliteLineageRepository.open(":memory:")
    save_evaluation = target.save_evaluation

    async def broken(record: EvaluationRecord) -> bool:
        raise ConnectionError("database went away")

    target.save_evaluation = broken  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        await import_run_bytes(target, data)
    assert await target.get_run("run-abc") is None
    target.save_evaluation = save_evaluation  # type: ignore[method-assign]
    report = await import_run_bytes(target, data)
    assert report.inserted["runs"] == 1 and report.inserted["evaluations"] == 1
    assert (await target.get_run("run-abc")).status == "finished"  # type: ignore[union-attr]
    await target.close()


async def test_builds_must_name_candidates_of_the_archive_too() -> None:
    repo = await SqliteLineageRepository.open(":memory:")
    await repo.save_run(
        RunRecord(run_id="run-b", task_name="t", hardware="cpu.x86_64", status="finished", created_at=AT)
    )
    await repo.save_build(
        BuildRecord(candidate_id="ghost", run_id="run-b", target="cpu.x86_64", ok=True, created_at=AT)
    )
    data, _ = await export_run_bytes(repo, "run-b")
    await repo.close()
    reason, message = reason_of(data)
    assert reason == "invalid_archive" and "builds.jsonl" in message
