"""Evolver event handler: generation, compile and evaluation events drive the runs."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import Message

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery
from kernelfoundry.bus.protocol import Outgoing
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2

log = get_logger(__name__)

EVOLVER_EVENTS = (
    subjects.CANDIDATES_GENERATED,
    subjects.CANDIDATE_COMPILED,
    subjects.EVALUATION_FINISHED,  # results published before results went on their pool's subject
    subjects.EVALUATION_FINISHED_ANY,
)


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
            out = self.runs.on_evaluated(event) if self._from_its_pool(event) else []
        else:
            out = []
        self._record_archive(out)
        return out

    def _from_its_pool(self, event: evaluation_pb2.EvaluationFinished) -> bool:
        """Whether a result comes from the executors its run was sent to. The result's subject already
        matched its claimed hardware (decode_event: only that pool may publish there); a run sends its
        candidates to one hardware, so a result claiming another is not one of its results."""
        run = self.runs.runs.get(event.run_id)
        if run is None or event.hardware == run.config.hardware:
            return True
        log.warning(
            "result from executors the run did not send to ignored",
            run_id=event.run_id,
            candidate_id=event.candidate_id,
            hardware=event.hardware,
            sent_to=run.config.hardware,
        )
        return False

    def _record_archive(self, out: Sequence[Outgoing]) -> None:
        """The archive gauges (cells filled, the best elite's speedup) from the updates this event
        produced (the run may have ended with it). A run's ending is recorded by run_metrics."""
        if self.metrics is None:
            return
        for message in out:
            if isinstance(message.message, run_pb2.ArchiveUpdated):
                cells = message.message.cells
                task = self._task_name(message.message.run_id)
                if task is not None:
                    best = max((cell.speedup for cell in cells), default=0.0)
                    self.metrics.record_archive_cells(task, len(cells), best_speedup=best)

    def _task_name(self, run_id: str) -> str | None:
        run = self.runs.runs.get(run_id)
        if run is not None:
            return run.task.name
        final = self.runs.final_progress(run_id)
        return final.task_name if final is not None else None
