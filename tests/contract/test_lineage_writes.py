"""Contract: writes are idempotent on their natural keys, and records come back exactly as written."""

from __future__ import annotations

from dataclasses import replace

import pytest
from lineage_sample import Sample, minutes

from kernelfoundry.lineage import LineageError, LineageRepository


async def test_every_save_is_new_once_and_a_redelivery_changes_nothing(
    repository: LineageRepository, sample: Sample
) -> None:
    writes = [
        (repository.save_run, sample.runs[0], replace(sample.runs[0], task_name="other")),
        (
            repository.save_candidate,
            sample.candidates[1],
            replace(sample.candidates[1], code="changed", parent_ids=("c9",)),
        ),
        (
            repository.save_build,
            sample.builds[0],
            replace(sample.builds[0], ok=False, reason="compile_error"),
        ),
        (repository.save_evaluation, sample.evaluations[0], replace(sample.evaluations[0], speedup=99.0)),
        (repository.save_snapshot, sample.snapshots[0], replace(sample.snapshots[0], cells=())),
        (repository.save_usage, sample.usage[0], replace(sample.usage[0], prompt_tokens=10**6)),
    ]
    for save, record, redelivered_variant in writes:
        assert await save(record) is True
        assert await save(record) is False
        assert await save(redelivered_variant) is False

    assert await repository.get_run("run-a") == sample.runs[0]
    assert await repository.get_candidate("c2") == sample.candidates[1]
    assert (await repository.lineage("c2")).ancestors == ()  # the variant's parent c9 was never stored
    assert await repository.builds_of_run("run-a") == [sample.builds[0]]
    assert await repository.evaluations_of_run("run-a") == [sample.evaluations[0]]
    assert await repository.snapshots("run-a") == [sample.snapshots[0]]
    # another update of the same iteration by another candidate's evaluation is a new snapshot
    assert await repository.save_snapshot(replace(sample.snapshots[0], candidate_id="c1", outcome="new_cell"))
    assert len(await repository.snapshots("run-a")) == 2
    assert await repository.usage_of_run("run-a") == [sample.usage[0]]


async def test_a_redelivered_event_is_journalled_once(repository: LineageRepository) -> None:
    assert await repository.record_event("e1", "run.started", "run-a", {"n": 1}, recorded_at=minutes(1))
    assert not await repository.record_event("e1", "run.started", "run-a", {"n": 2}, recorded_at=minutes(5))
    events = await repository.events_of_run("run-a")
    assert [(e.event_id, e.payload) for e in events] == [("e1", {"n": 1})]


async def test_journal_of_a_run_is_in_arrival_order(stored: LineageRepository, sample: Sample) -> None:
    events = await stored.events_of_run("run-a")
    expected = sorted(
        (c.created_at, f"evt-{c.candidate_id}") for c in sample.candidates if c.run_id == "run-a"
    )
    assert [(e.recorded_at, e.event_id) for e in events] == expected
    assert all(e.kind == "candidate.generated" for e in events)


async def test_update_run_status_changes_once_then_is_a_no_op(stored: LineageRepository) -> None:
    finished = minutes(90)
    assert await stored.update_run_status("run-a", "finished", finished_at=finished, summary={"best": 2.5})
    assert not await stored.update_run_status(
        "run-a", "finished", finished_at=finished, summary={"best": 2.5}
    )
    run = await stored.get_run("run-a")
    assert (run.status, run.finished_at, run.summary) == ("finished", finished, {"best": 2.5})
    assert run.config == {"iterations": 4, "islands": 2, "targets": ["cuda.h200"]}


async def test_update_run_status_of_an_unknown_run_names_it(repository: LineageRepository) -> None:
    with pytest.raises(LineageError) as caught:
        await repository.update_run_status("run-missing", "finished")
    assert caught.value.reason == "run_not_found"
    assert "run-missing" in caught.value.message


async def test_timestamps_come_back_as_the_same_utc_instant(
    stored: LineageRepository, sample: Sample
) -> None:
    run = await stored.get_run("run-b")
    assert run.created_at == sample.runs[1].created_at
    assert run.created_at.utcoffset().total_seconds() == 0
