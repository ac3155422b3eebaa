"""The facts the lineage store keeps: one frozen dataclass per kind of record, no behaviour but validation.

Fields are plain values (str, int, float, bool, dict, tuple, aware UTC datetime) so that the store service
maps protobuf events onto them field by field and the repository needs to know nothing of protobuf.
Timestamps are normalised to UTC with millisecond precision, the precision of a BSON date, so both backends
hand back exactly what they were given. This module must never import a database driver or transport.

Natural keys (what makes a write idempotent):
  RunRecord run_id · CandidateRecord candidate_id · BuildRecord (candidate_id, target) ·
  EvaluationRecord (candidate_id, hardware) · ArchiveSnapshot (run_id, iteration, candidate_id) ·
  UsageRecord usage_id · EventRecord event_id
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.lineage.errors import LineageError

# stopped: imported unfinished from another deployment; never resumed on its own (see lineage/export.py)
RUN_STATUSES = ("running", "finished", "failed", "cancelled", "stopped")


def utc_ms(moment: datetime) -> datetime:
    """`moment` in UTC, cut to whole milliseconds; a naive datetime is taken to be UTC already."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _normalise(record: object, *names: str) -> None:
    for name in names:
        value = getattr(record, name)
        if isinstance(value, datetime):
            object.__setattr__(record, name, utc_ms(value))


def _require(record: object, *names: str) -> None:
    for name in names:
        if not getattr(record, name):
            raise LineageError("invalid_record", f"{type(record).__name__}.{name} must not be empty")


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    run_id: str
    task_name: str
    task_source: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    hardware: str = ""
    status: str = "running"
    created_at: datetime
    finished_at: datetime | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(self, "run_id", "task_name")
        if self.status not in RUN_STATUSES:
            raise LineageError("invalid_record", f"run status {self.status!r} is not one of {RUN_STATUSES}")
        _normalise(self, "created_at", "finished_at")


@dataclass(frozen=True, kw_only=True)
class CandidateRecord:
    candidate_id: str
    run_id: str
    parent_ids: tuple[str, ...] = ()
    iteration: int = 0
    generator: str = ""
    language: str = "cpp"
    code: str = ""
    entry_point: str = "kf_forward"
    glue: str = ""
    params: dict[str, int | str] = field(default_factory=dict)
    self_reported: Descriptors | None = None
    analysed: Descriptors | None = None
    prompt_variant_id: str = ""
    mutation: str = ""
    island: int = 0
    created_at: datetime
    repair_of: str = ""  # for a repair: the failed candidate it repairs

    def __post_init__(self) -> None:
        _require(self, "candidate_id", "run_id")
        object.__setattr__(self, "parent_ids", tuple(self.parent_ids))
        if self.candidate_id in self.parent_ids:
            raise LineageError("invalid_record", f"candidate {self.candidate_id} lists itself as a parent")
        _normalise(self, "created_at")


@dataclass(frozen=True, kw_only=True)
class BuildRecord:
    """One build of a candidate for one target (`cuda.sm90`, `cpu.x86_64`); `log` is a capped blob."""

    candidate_id: str
    run_id: str
    target: str
    ok: bool
    reason: str = ""
    log: str = ""
    duration_s: float = 0.0
    artifact: str = ""
    cache_hit: bool = False
    created_at: datetime
    blob_purged: bool = False

    def __post_init__(self) -> None:
        _require(self, "candidate_id", "run_id", "target")
        _normalise(self, "created_at")


@dataclass(frozen=True, kw_only=True)
class EvaluationRecord:
    candidate_id: str
    run_id: str
    hardware: str
    correct: bool
    reason: str = ""
    message: str = ""
    runtime_ms: float | None = None
    baseline_ms: float | None = None
    compile_baseline_ms: float | None = None
    speedup: float | None = None
    max_abs_error: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    evaluated_at: datetime

    def __post_init__(self) -> None:
        _require(self, "candidate_id", "run_id", "hardware")
        _normalise(self, "evaluated_at")


@dataclass(frozen=True, kw_only=True)
class ArchiveSnapshot:
    """The MAP-Elites archive of a run as it stood at one moment; each cell is a plain dict.

    `candidate_id` names the evaluation that changed the archive (empty for a snapshot taken at the end of
    an iteration) and `outcome` what it did to it, so every update of an iteration is kept.
    """

    run_id: str
    iteration: int
    candidate_id: str = ""
    outcome: str = ""
    taken_at: datetime
    cells: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        _require(self, "run_id")
        object.__setattr__(self, "cells", tuple(self.cells))
        _normalise(self, "taken_at")


@dataclass(frozen=True, kw_only=True)
class UsageRecord:
    """Tokens and cost of one generation request; `usage_id` (the request id) makes redelivery harmless."""

    usage_id: str
    run_id: str
    generator: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    recorded_at: datetime

    def __post_init__(self) -> None:
        _require(self, "usage_id", "run_id", "generator")
        _normalise(self, "recorded_at")


@dataclass(frozen=True, kw_only=True)
class EventRecord:
    """The journal: every event as it arrived, so nothing is lost even before a typed record exists."""

    event_id: str
    kind: str
    run_id: str
    payload: dict[str, Any] = field(default_factory=dict)
    recorded_at: datetime

    def __post_init__(self) -> None:
        _require(self, "event_id", "kind")
        _normalise(self, "recorded_at")


Record = (
    RunRecord | CandidateRecord | BuildRecord | EvaluationRecord | ArchiveSnapshot | UsageRecord | EventRecord
)
