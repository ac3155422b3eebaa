"""Contract: a run exported from SQLite and imported into any backend answers every query the same."""

from __future__ import annotations

import tarfile
from pathlib import Path

from lineage_sample import RepositoryFactory, Sample, minutes, store_sample

from kernelfoundry.lineage import LineageRepository, export_run, import_run


async def answers(repository: LineageRepository, run_id: str) -> dict[str, object]:
    """Every query's answer about one run, as comparable values."""
    candidates = await repository.candidates_of_run(run_id)
    return {
        "run": await repository.get_run(run_id),
        "runs": await repository.list_runs(),
        "candidates": candidates,
        "builds": await repository.builds_of_run(run_id),
        "evaluations": await repository.evaluations_of_run(run_id),
        "lineage": [await repository.lineage(c.candidate_id) for c in candidates],
        "best": await repository.best_kernels(),
        "snapshots": await repository.snapshots(run_id),
        "window": await repository.snapshots(run_id, since=minutes(11), until=minutes(12)),
        "failures": await repository.failures(run_id=run_id),
        "all_failures": await repository.failures(),
        "usage": await repository.usage_of_run(run_id),
        "usage_by_generator": await repository.usage_totals(run_id=run_id),
        "usage_by_run": await repository.usage_totals(group_by="run"),
        "events": await repository.events_of_run(run_id),
    }


async def test_export_from_sqlite_and_import_answers_every_query_alike(
    backend: str, open_backend: RepositoryFactory, sample: Sample, tmp_path: Path
) -> None:
    source = await open_backend("sqlite")
    # only run-a travels, so give the source nothing else to answer with
    only_a = Sample(
        runs=sample.runs[:1],
        candidates=tuple(c for c in sample.candidates if c.run_id == "run-a"),
        builds=tuple(b for b in sample.builds if b.run_id == "run-a"),
        evaluations=tuple(e for e in sample.evaluations if e.run_id == "run-a"),
        snapshots=sample.snapshots,
        usage=tuple(u for u in sample.usage if u.run_id == "run-a"),
    )
    await store_sample(source, only_a)
    await source.update_run_status("run-a", "finished", finished_at=minutes(50), summary={"best": 2.5})
    archive = tmp_path / "run-a.tar.gz"
    counts = await export_run(source, "run-a", archive)
    assert counts == {"candidates": 5, "builds": 5, "evaluations": 5, "snapshots": 5, "usage": 3, "events": 5}

    target = await open_backend(backend)
    report = await import_run(target, archive)
    assert report.run_id == "run-a"
    assert report.inserted == {"runs": 1, **counts}
    assert await answers(target, "run-a") == await answers(source, "run-a")


async def test_importing_the_same_archive_twice_changes_nothing(
    stored: LineageRepository, tmp_path: Path
) -> None:
    archive = tmp_path / "run-a.tar.gz"
    await export_run(stored, "run-a", archive)
    before = await answers(stored, "run-a")
    report = await import_run(stored, archive)
    assert set(report.inserted.values()) == {0}
    assert await answers(stored, "run-a") == before


async def test_archive_keeps_kernel_sources_as_files(stored: LineageRepository, tmp_path: Path) -> None:
    archive = tmp_path / "run-a.tar.gz"
    await export_run(stored, "run-a", archive)
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        source = tar.extractfile("kernels/c2.cu").read().decode()
    assert {"manifest.json", "run.json", "candidates.jsonl", "kernels/c1.cu", "kernels/c2.glue.py"} <= names
    assert "kernels/c1.glue.py" not in names  # c1 has no glue
    assert source == '#include "kf_abi.h"\n// kernel c2\n'
