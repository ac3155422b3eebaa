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
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self

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
        """Per (task, hardware) across all runs, the correct evaluation with the highest speedup
        (ties: lower runtime, then candidate id), ordered by (task_name, hardware)."""

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
