"""Store handler: every event on the history stream becomes lineage, idempotently."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from google.protobuf.message import Message

from kernelfoundry.bus.consumer import Delivery, Retry
from kernelfoundry.bus.jetstream import Outgoing
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
        repo = self.repository
        try:
            if isinstance(event, run_pb2.RunSubmitted):
                await repo.save_run(records.run_record(event))
            elif isinstance(event, run_pb2.RunFinished):
                await repo.update_run_status(
                    event.run_id,
                    records.STATUS_NAMES.get(event.status, "finished"),
                    finished_at=datetime.fromtimestamp(event.finished_at or time.time(), UTC),
                    summary=records.finished_summary(event),
                )
            elif isinstance(event, search_pb2.CandidateCreated):
                await repo.save_candidate(records.candidate_record(event))
            elif isinstance(event, build_pb2.CandidateCompiled):
                await repo.save_build(records.build_record(event))
            elif isinstance(event, evaluation_pb2.EvaluationFinished):
                await repo.save_evaluation(records.evaluation_record(event))
            elif isinstance(event, run_pb2.ArchiveUpdated):
                await repo.save_snapshot(records.snapshot_record(event))
            elif isinstance(event, search_pb2.CandidatesGenerated):
                await repo.save_usage(records.usage_record(event))
            await repo.record_event(
                event_id, kind, run_id, records.payload(event), recorded_at=datetime.now(UTC)
            )
        except LineageError as exc:
            if exc.reason == "run_not_found":
                # The run's own record has not arrived yet (events of one run can interleave): try again.
                raise Retry(str(exc), delay_s=1.0) from exc
            raise
        if self.metrics is not None:
            self.metrics.store_events_written_total.labels(kind=kind).inc()
            self.metrics.store_write_duration_seconds.observe(time.perf_counter() - started)
        return []
