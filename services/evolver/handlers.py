"""Evolver event handler: generation, compile and evaluation events drive the runs."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import Message

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery
from kernelfoundry.bus.jetstream import Outgoing
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2

EVOLVER_EVENTS = (subjects.CANDIDATES_GENERATED, subjects.CANDIDATE_COMPILED, subjects.EVALUATION_FINISHED)


class EventHandler:
    def __init__(self, runs: RunCoordinator, metrics: Metrics | None = None) -> None:
        self.runs = runs
        self.metrics = metrics

    async def __call__(self, event: Message, delivery: Delivery) -> Sequence[Outgoing]:
        if isinstance(event, search_pb2.CandidatesGenerated):
            out = self.runs.on_generated(event)
        elif isinstance(event, build_pb2.CandidateCompiled):
            out = self.runs.on_compiled(event)
        elif isinstance(event, evaluation_pb2.EvaluationFinished):
            out = self.runs.on_evaluated(event)
            self._record_archive(event)
        else:
            out = []
        self._record_finished(out)
        return out

    def _record_archive(self, event: evaluation_pb2.EvaluationFinished) -> None:
        run = self.runs.runs.get(event.run_id)
        if self.metrics is None or run is None:
            return
        self.metrics.archive_cells_filled.labels(task=run.task.name).set(
            len(run.engine.merged_archive().elites())
        )

    def _record_finished(self, out: Sequence[Outgoing]) -> None:
        if self.metrics is None:
            return
        for message in out:
            if isinstance(message.message, run_pb2.RunFinished):
                progress = message.message.progress
                if progress.HasField("speedup"):  # the run's one figure (kernelfoundry.domain.speedup)
                    self.metrics.record_speedup(
                        progress.task_name, progress.config.hardware, progress.speedup.speedup
                    )
                self.metrics.runs_active.dec()
                status = run_pb2.RunStatus.Name(message.message.status).removeprefix("RUN_STATUS_").lower()
                self.metrics.runs_total.labels(status=status).inc()
