"""The lineage repository interface: every backend (SQLite, MongoDB) implements exactly this.

Writes are idempotent. Each `save_*` inserts the record only if its natural key (see records.py) is not
stored yet and returns True when it did; a redelivered event therefore changes nothing and returns False.
`update_run_status` is the one mutation of an existing record, and setting the same values twice is a no-op.
The store service applies the typed write first and then `record_event`, both idempotent, so a crash between
the two loses nothing on redelivery.

Must never know about protobuf, NATS or gRPC: the service maps messages to records before calling in.
"""

from __future__ import annotations

import abc
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self

from kernelfoundry.domain.speedup import Measurement, run_speedup
from kernelfoundry.lineage.records import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    EventRecord,
    RunRecord,
    UsageRecord,
)
from kernelfoundry.lineage.views import (
    BestKernel,
    FailureCount,
    LineageTree,
    PurgeReport,
    UsageTotal,
)

SCHEMA_VERSION = 1
UsageGrouping = Literal["generator", "run"]


def measurement_of(record: EvaluationRecord) -> Measurement:
    """A stored evaluation's timings, as the speedup definition (kernelfoundry.domain.speedup) reads them."""
    spread = record.details.get("runtime_spread_ms") if isinstance(record.details, dict) else None
    return Measurement(
        candidate_id=record.candidate_id,
        correct=record.correct,
        runtime_ms=record.runtime_ms,
        runtime_spread_ms=float(spread) if isinstance(spread, int | float) else None,
        baseline_ms=record.baseline_ms,
        compile_baseline_ms=record.compile_baseline_ms,
    )


def rank_best_kernels(
    task_of: Mapping[str, str], evaluations: Iterable[EvaluationRecord]
) -> list[BestKernel]:
    """Per (task, hardware): the fastest of the runs' best kernels, each with its run's one speedup figure.

    Every run's figure is computed from that run's evaluations on that hardware alone (the fastest kernel by
    its own time over the run's pooled eager median, re-timed when the run re-timed it); across runs the
    kernel with the lowest time wins (ties: the higher speedup, then the candidate id). Runs missing from
    `task_of` are skipped.
    """
    per_run: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for record in evaluations:
        if record.run_id in task_of:
            per_run[(record.run_id, record.hardware)].append(measurement_of(record))
    best: dict[tuple[str, str], BestKernel] = {}
    for (run_id, hardware), measurements in sorted(per_run.items()):
        figure = run_speedup(measurements)
        if figure is None:
            continue
        kernel = BestKernel(
            task_of[run_id], hardware, figure.candidate_id, run_id, figure.speedup, figure.kernel_ms
        )
        key = (kernel.task_name, hardware)
        held = best.get(key)
        if held is None or _rank(kernel) < _rank(held):
            best[key] = kernel
    return [best[key] for key in sorted(best)]


def _rank(kernel: BestKernel) -> tuple[float, float, str]:
    return (kernel.runtime_ms or 0.0, -kernel.speedup, kernel.candidate_id)


class LineageRepository(abc.ABC):
    """Async access to runs, candidates, builds, evaluations, archive snapshots, usage and the journal."""

    # ---- writes (idempotent) ----
    @abc.abstractmethod
    async def save_run(self, run: RunRecord) -> bool: ...

    @abc.abstractmethod
    async def update_run_status(
        self,
        run_id: str,
        status: str,
        *,
        finished_at: datetime | None = None,
        summary: dict[str, Any] | None = None,
    ) -> bool:
        """Set a run's status (and finish time, summary when given); False if nothing changed.

        Raises LineageError(run_not_found) for an unknown run.
        """

    @abc.abstractmethod
    async def save_candidate(self, candidate: CandidateRecord) -> bool: ...

    @abc.abstractmethod
    async def save_build(self, build: BuildRecord) -> bool:
        """Store a build; its log is capped to the retention policy's size first."""

    @abc.abstractmethod
    async def save_evaluation(self, evaluation: EvaluationRecord) -> bool: ...

    @abc.abstractmethod
    async def save_snapshot(self, snapshot: ArchiveSnapshot) -> bool: ...

    @abc.abstractmethod
    async def save_usage(self, usage: UsageRecord) -> bool: ...

    @abc.abstractmethod
    async def record_event(
        self, event_id: str, kind: str, run_id: str, payload: dict[str, Any], *, recorded_at: datetime
    ) -> bool:
        """Journal one event as it arrived; False if `event_id` is already journalled."""

    # ---- reads ----
    @abc.abstractmethod
    async def get_run(self, run_id: str) -> RunRecord | None: ...

    @abc.abstractmethod
    async def list_runs(
        self, *, task_name: str | None = None, status: str | None = None, limit: int | None = 100
    ) -> list[RunRecord]:
        """Runs, newest first (created_at, then run_id, descending); at most `limit`, all when None."""

    @abc.abstractmethod
    async def get_candidate(self, candidate_id: str) -> CandidateRecord | None: ...

    @abc.abstractmethod
    async def candidates_of_run(self, run_id: str) -> list[CandidateRecord]:
        """Every candidate of a run in replay order: (iteration, created_at, candidate_id)."""

    @abc.abstractmethod
    async def builds_of_run(self, run_id: str) -> list[BuildRecord]:
        """Every build of a run in order: (created_at, candidate_id, target)."""

    @abc.abstractmethod
    async def evaluations_of_run(self, run_id: str) -> list[EvaluationRecord]:
        """Every evaluation of a run in order: (evaluated_at, candidate_id, hardware)."""

    @abc.abstractmethod
    async def lineage(self, candidate_id: str, *, max_depth: int | None = None) -> LineageTree | None:
        """Ancestors and descendants of a candidate, each with its shortest depth; None if unknown."""

    @abc.abstractmethod
    async def best_kernels(
        self, *, task_name: str | None = None, hardware: str | None = None
    ) -> list[BestKernel]:
        """Per (task, hardware) across all runs, the fastest run-best kernel with its run's speedup figure
        (`rank_best_kernels`: the one definition of kernelfoundry.domain.speedup), ordered by
        (task_name, hardware)."""

    @abc.abstractmethod
    async def snapshots(
        self, run_id: str, *, since: datetime | None = None, until: datetime | None = None
    ) -> list[ArchiveSnapshot]:
        """Archive snapshots of a run taken in [since, until].

        Ordered by (iteration, taken_at, candidate_id)."""

    @abc.abstractmethod
    async def failures(self, *, run_id: str | None = None) -> list[FailureCount]:
        """Failed builds and incorrect evaluations grouped by (stage, reason), most frequent first."""

    @abc.abstractmethod
    async def usage_of_run(self, run_id: str) -> list[UsageRecord]:
        """Every usage record of a run in order: (recorded_at, usage_id)."""

    @abc.abstractmethod
    async def usage_totals(
        self, *, run_id: str | None = None, group_by: UsageGrouping = "generator"
    ) -> list[UsageTotal]:
        """Token and cost totals grouped by generator or by run, ordered by key."""

    @abc.abstractmethod
    async def events_of_run(self, run_id: str) -> list[EventRecord]:
        """The journal of a run in order: (recorded_at, event_id)."""

    # ---- retention ----
    @abc.abstractmethod
    async def purge_expired_blobs(self, now: datetime) -> PurgeReport:
        """Empty build logs and artifact references older than the retention policy's TTL."""

    # ---- lifecycle ----
    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
