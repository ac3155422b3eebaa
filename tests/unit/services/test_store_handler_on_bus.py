"""The store's handler on the in-memory bus: an event that arrives before its run's record comes back
until the record is written, then both are lineage; an event no record can hold is dead-lettered."""

from __future__ import annotations

from pathlib import Path

from kernelfoundry.bus import subjects
from kernelfoundry.bus.events import decode_event
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.bus.protocol import ConsumerSpec
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository
from kernelfoundry.services.store.handlers import StoreHandler
from kernelfoundry.v1 import run_pb2, search_pb2

from .bus_support import consume_until, published
from .test_store_handler import submitted

RUN = "run-000000000001"


def store_spec() -> ConsumerSpec:
    return ConsumerSpec(
        stream=subjects.EVENTS_STREAM,
        durable="store",
        filter_subjects=(f"{subjects.EVENTS_PREFIX}.>",),
        batch=64,
        max_deliver=5,
    )


async def test_a_run_ending_before_its_record_is_retried_until_the_record_is_written(tmp_path: Path) -> None:
    bus = InMemoryBus()
    repository = await SqliteLineageRepository.open(tmp_path / "lineage.db")
    try:
        finished = run_pb2.RunFinished(
            run_id=RUN, status=run_pb2.RUN_STATUS_COMPLETED, finished_at=1.8e9 + 60
        )
        await bus.publish(subjects.RUN_FINISHED, finished, f"finished-{RUN}")
        created = search_pb2.CandidateCreated(candidate_id=f"{RUN}-g0-r0-c0", run_id=RUN, iteration=0)
        handler = StoreHandler(repository)

        async def later_submission() -> None:
            await bus.publish(subjects.RUN_SUBMITTED, submitted(RUN), f"submitted-{RUN}")
            await bus.publish(subjects.CANDIDATE_CREATED, created, f"created-{created.candidate_id}")

        ending_deliveries: list[int] = []

        async def handle(event, delivery):  # type: ignore[no-untyped-def]
            if delivery.stream_sequence == 1:
                ending_deliveries.append(delivery.deliveries)
            try:
                return await handler(event, delivery)
            finally:
                if delivery.stream_sequence == 1 and delivery.deliveries == 1:
                    await later_submission()  # the run's record is published after its ending was seen

        consumer = await consume_until(
            bus, store_spec(), decode_event, handle, lambda c: c.stats.handled == 3, timeout_s=30
        )
        assert consumer.stats.dead_lettered == 0
        assert ending_deliveries == [1, 2]  # Retry: back once the run's record was there
        record = await repository.get_run(RUN)
        assert record is not None and record.status == "finished"
        assert [c.candidate_id for c in await repository.candidates_of_run(RUN)] == [created.candidate_id]
    finally:
        await repository.close()


async def test_an_event_no_record_can_hold_is_dead_lettered(tmp_path: Path) -> None:
    bus = InMemoryBus()
    repository = await SqliteLineageRepository.open(tmp_path / "lineage.db")
    try:
        await bus.publish(subjects.RUN_SUBMITTED, submitted(run_id=""), "submitted-empty")
        await consume_until(
            bus,
            store_spec(),
            decode_event,
            StoreHandler(repository),
            lambda c: c.stats.dead_lettered == 1,
            timeout_s=30,
        )
        [letter] = await published(
            bus, subjects.DEADLETTER_STREAM, subjects.deadletter(subjects.RUN_SUBMITTED), run_pb2.DeadLetter
        )
        assert letter.reason == "invalid_event"
        assert await repository.list_runs() == []
    finally:
        await repository.close()
