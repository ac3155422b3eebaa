"""A run's reported speedup is recomputed, by the one definition, from the measurements the store keeps.

The evolver is driven with events (no broker); every event it consumes or emits goes through the store's
record mapping into a real SQLite lineage; the figure `RunFinished` reports, `lineage best` and a fresh
computation over `evaluations_of_run` must agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.domain.speedup import run_speedup
from kernelfoundry.lineage.export import export_run_bytes, import_run_bytes
from kernelfoundry.lineage.repository import measurement_of
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository
from kernelfoundry.services.store import records
from kernelfoundry.v1 import evaluation_pb2, run_pb2, search_pb2
from tests.unit.services.test_evolver_runs import generated, kernel, requests, retime_of, start


def timed(candidate_id: str, runtime_ms: float, baseline_ms: float) -> evaluation_pb2.EvaluationFinished:
    return evaluation_pb2.EvaluationFinished(
        candidate_id=candidate_id,
        run_id="run-1",
        hardware="cpu.x86_64",
        correct=True,
        runtime_ms=runtime_ms,
        runtime_spread_ms=runtime_ms / 20,
        baseline_ms=baseline_ms,
        speedup=baseline_ms / runtime_ms,
        details_json=f'{{"runtime_spread_ms": {runtime_ms / 20}}}',
    )


async def test_the_reported_speedup_is_recomputed_from_the_stored_measurements(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=1, population=3)
    submitted = out[0].message
    (request,) = requests(out)
    created = runs.on_generated(generated(request, kernel(1), kernel(2), kernel(3)))
    ids = [f"{request.request_id}-c{i}" for i in range(3)]
    # eager 8 ms twice and once 25 ms (a noisy timing beside the slowest kernel, 7.8x by its own ratio)
    events = [timed(ids[0], 2.0, 8.0), timed(ids[1], 3.2, 25.0), timed(ids[2], 2.5, 8.2)]
    emitted = []
    for event in events:
        emitted += runs.on_evaluated(event)
    created += emitted
    retime = timed(retime_of(emitted).candidate_id, 2.1, 8.4)
    events.append(retime)
    (finished,) = [o.message for o in runs.on_evaluated(retime) if isinstance(o.message, run_pb2.RunFinished)]

    repository = await SqliteLineageRepository.open(tmp_path / "lineage.db")
    try:
        await repository.save_run(records.run_record(submitted))
        for message in created:
            if isinstance(message.message, search_pb2.CandidateCreated):
                await repository.save_candidate(records.candidate_record(message.message))
        for event in events:
            await repository.save_evaluation(records.evaluation_record(event))
        await repository.update_run_status("run-1", "finished", summary=records.finished_summary(finished))
        stored = await repository.evaluations_of_run("run-1")
        recomputed = run_speedup([measurement_of(e) for e in stored])
        (best,) = await repository.best_kernels()
        summary = (await repository.get_run("run-1")).summary  # type: ignore[union-attr]
        archive, _ = await export_run_bytes(repository, "run-1")
    finally:
        await repository.close()
    copy = await SqliteLineageRepository.open(tmp_path / "copy.db")
    try:  # the re-time is a candidate of the lineage: the run moves between stores whole
        report = await import_run_bytes(copy, archive)
        assert report.inserted["evaluations"] == 4
        (retime_record,) = [c for c in await copy.candidates_of_run("run-1") if c.mutation == "retime"]
        assert retime_record.parent_ids == (ids[0],)
    finally:
        await copy.close()

    assert recomputed is not None and recomputed.candidate_id == ids[0]
    assert recomputed.speedup == pytest.approx(8.3 / 2.1)  # median of 8.0, 25.0, 8.2, 8.4 over the re-time
    assert recomputed.eager.outliers_ms == (25.0,)
    assert finished.progress.speedup.speedup == pytest.approx(recomputed.speedup)
    assert finished.progress.best_speedup == pytest.approx(recomputed.speedup)
    assert summary["best_speedup"] == pytest.approx(recomputed.speedup)
    assert (best.candidate_id, best.runtime_ms) == (ids[0], 2.1)
    assert best.speedup == pytest.approx(recomputed.speedup)
