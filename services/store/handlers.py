"""Store handler: every event on the history stream becomes lineage, idempotently."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from google.protobuf.message import Message

from kernelfoundry.bus.consumer import Delivery, Reject, Retry
from kernelfoundry.bus.protocol import Outgoing
from kernelfoundry.lineage.errors import LineageError
from kernelfoundry.lineage.repository import LineageRepository
from kernelfoundry.services.store import records
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2


class StoreHandler:
    def __init__(self, repository: LineageRepository, metrics: Metrics | None = None) -> None:
        self.repository = repository
        self.metrics = metrics

    async def __call__(self, event: Message, delivery: Delivery) -> Sequence[Outgoing]:
        started = time.perf_counter()
        event_id, kind, run_id = records.event_identity(event)
        try:
            write = self._write_for(event)
            journal = records.payload(event)
        except (LineageError, ValueError, OverflowError) as exc:
            # Fields no record can hold (an empty id, a level outside its axis, a time beyond the
            # platform's range, NaN where JSON is written): a redelivery cannot make the event valid.
            raise Reject("invalid_event", f"{kind} {event_id!r} cannot be recorded: {exc}") from exc
        try:
            await write()
            await self.repository.record_event(event_id, kind, run_id, journal, recorded_at=datetime.now(UTC))
        except LineageError as exc:
            if exc.reason == "run_not_found":
                # The run's own record has not arrived yet (events of one run can interleave): try again.
                raise Retry(str(exc), delay_s=1.0) from exc
            raise
        if self.metrics is not None:
            self.metrics.store_events_written_total.labels(kind=kind).inc()
            self.metrics.store_write_duration_seconds.observe(time.perf_counter() - started)
        return []

    def _write_for(self, event: Message) -> Callable[[], Awaitable[object]]:
        """The repository write that records `event`, its record built here (pure: raises for an event
        whose fields no record can hold, before anything is written)."""
        repo = self.repository
        if isinstance(event, run_pb2.RunSubmitted):
            run = records.run_record(event)
            return lambda: repo.save_run(run)
        if isinstance(event, run_pb2.RunFinished):
            status = records.STATUS_NAMES.get(event.status, "finished")
            finished_at = datetime.fromtimestamp(event.finished_at or time.time(), UTC)
            summary = records.finished_summary(event)
            return lambda: repo.update_run_status(
                event.run_id, status, finished_at=finished_at, summary=summary
            )
        if isinstance(event, run_pb2.RunResumed):  # a stopped run continues (ResumeRun)
            run_id = event.run_id

            async def resume() -> bool:
                # Only a stopped run continues: a RunResumed replayed after the run's RunFinished (a
                # redelivery, a replayed history) must not reopen a run that has ended.
                run = await repo.get_run(run_id)
                if run is not None and run.status != "stopped":
                    return False
                return await repo.update_run_status(run_id, "running")

            return resume
        if isinstance(event, search_pb2.CandidateCreated):
            candidate = records.candidate_record(event)
            return lambda: repo.save_candidate(candidate)
        if isinstance(event, build_pb2.CandidateCompiled):
            build = records.build_record(event)
            return lambda: repo.save_build(build)
        if isinstance(event, evaluation_pb2.EvaluationFinished):
            evaluation = records.evaluation_record(event)
            return lambda: repo.save_evaluation(evaluation)
        if isinstance(event, run_pb2.ArchiveUpdated):
            snapshot = records.snapshot_record(event)
            return lambda: repo.save_snapshot(snapshot)
        if isinstance(event, search_pb2.CandidatesGenerated):
            usages = records.usage_records(event)

            async def save_usages() -> None:
                for usage in usages:
                    await repo.save_usage(usage)

            return save_usages
        return _nothing


async def _nothing() -> None:
    return None
