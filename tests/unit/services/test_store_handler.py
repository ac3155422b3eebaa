"""The store's event handler: events become lineage once; events no record can hold are refused at once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kernelfoundry.bus.consumer import Delivery, Reject, Retry
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository
from kernelfoundry.services.store.handlers import StoreHandler
from kernelfoundry.v1 import kernel_pb2, run_pb2, search_pb2, task_pb2

DELIVERY = Delivery(subject="kf.events.test", deliveries=1, stream_sequence=1)


@pytest.fixture
async def repo() -> AsyncIterator[SqliteLineageRepository]:
    repository = await SqliteLineageRepository.open(":memory:")
    try:
        yield repository
    finally:
        await repository.close()


def submitted(run_id: str = "run-000000000001") -> run_pb2.RunSubmitted:
    return run_pb2.RunSubmitted(
        run_id=run_id,
        task=task_pb2.Task(name="t", reference_source="import torch\n"),
        config=run_pb2.RunConfig(hardware="cpu.x86_64"),
        submitted_at=1.8e9,
    )


async def test_a_run_and_its_candidate_are_written_once_however_often_delivered(
    repo: SqliteLineageRepository,
) -> None:
    handler = StoreHandler(repo)
    created = search_pb2.CandidateCreated(candidate_id="c1", run_id="run-000000000001", iteration=1)
    for _ in range(2):
        await handler(submitted(), DELIVERY)
        await handler(created, DELIVERY)
    assert [c.candidate_id for c in await repo.candidates_of_run("run-000000000001")] == ["c1"]


async def test_the_end_of_a_run_not_recorded_yet_comes_back_later(repo: SqliteLineageRepository) -> None:
    finished = run_pb2.RunFinished(run_id="run-000000000002", status=run_pb2.RUN_STATUS_COMPLETED)
    with pytest.raises(Retry):
        await StoreHandler(repo)(finished, DELIVERY)


@pytest.mark.parametrize(
    ("event", "needle"),
    [
        (submitted(run_id=""), "run_id must not be empty"),
        (run_pb2.RunFinished(run_id="run-000000000001", finished_at=1e300), "out of range"),
        (
            search_pb2.CandidateCreated(
                candidate_id="c1",
                run_id="run-000000000001",
                analysed=kernel_pb2.Descriptors(algorithm=2**31 - 1),
            ),
            "outside",
        ),
        (search_pb2.CandidateCreated(candidate_id="", run_id="run-000000000001"), "must not be empty"),
    ],
)
async def test_an_event_no_record_can_hold_is_refused_at_once_and_writes_nothing(
    repo: SqliteLineageRepository, event: object, needle: str
) -> None:
    handler = StoreHandler(repo)
    await handler(submitted(), DELIVERY)
    with pytest.raises(Reject) as refused:
        await handler(event, DELIVERY)  # type: ignore[arg-type]
    assert refused.value.reason == "invalid_event"
    assert needle in refused.value.message
    assert await repo.candidates_of_run("run-000000000001") == []
    run = await repo.get_run("run-000000000001")
    assert run is not None and run.status == "running"


async def test_a_resume_continues_a_stopped_run_and_never_reopens_an_ended_one(
    repo: SqliteLineageRepository,
) -> None:
    handler = StoreHandler(repo)
    run_id = "run-000000000003"
    await handler(submitted(run_id), DELIVERY)
    await repo.update_run_status(run_id, "stopped")
    resumed = run_pb2.RunResumed(run_id=run_id)
    await handler(resumed, DELIVERY)
    assert (await repo.get_run(run_id)).status == "running"  # type: ignore[union-attr]
    await handler(run_pb2.RunFinished(run_id=run_id, status=run_pb2.RUN_STATUS_COMPLETED), DELIVERY)
    await handler(resumed, DELIVERY)  # replayed after the end
    assert (await repo.get_run(run_id)).status == "finished"  # type: ignore[union-attr]
