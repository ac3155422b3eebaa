"""What a run report says: every figure of `kernelfoundry report RUN`, built from a run's lineage records.

`build_report` takes the records the lineage store keeps for one run (the run, its candidates, builds,
evaluations and archive snapshots, as a run archive holds them) and returns a `RunReport`: plain frozen
dataclasses that the HTML rendering (kernelfoundry.report.html) draws and prints. Speedups follow the one
definition of kernelfoundry.domain.speedup: each kernel's time over the run's pooled eager median, and the
run's figure from the re-timed fastest kernel.

Pure: no I/O, no protobuf, no plotting. Must never read a file, a database or the network.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kernelfoundry.domain.descriptors import AXES, CELL_COUNT, LEVELS, Descriptors
from kernelfoundry.domain.speedup import (
    PooledBaseline,
    RunSpeedup,
    kernel_speedup,
    pool_baseline,
    retimed_candidate,
    run_speedup,
)
from kernelfoundry.lineage.records import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    RunRecord,
)
from kernelfoundry.lineage.repository import measurement_of
from kernelfoundry.lineage.views import FailureCount

NOT_EVALUATED = "not evaluated"


@dataclass(frozen=True)
class CurvePoint:
    """One evaluation in the order the run made them (re-times left out: they measure a kernel again).

    `speedup` is the kernel's time over the run's pooled eager median (None when it failed or was not
    timed); `best_so_far` the highest such speedup up to and including this evaluation."""

    index: int
    candidate_id: str
    iteration: int
    speedup: float | None
    best_so_far: float | None
    reason: str


@dataclass(frozen=True)
class ArchiveCell:
    """One filled MAP-Elites cell of the archive as the run's last snapshot left it."""

    descriptors: Descriptors
    candidate_id: str
    speedup: float
    runtime_ms: float | None


@dataclass(frozen=True)
class CoveragePoint:
    """The archive at the end of one iteration: how many of its cells were filled, and the best elite."""

    iteration: int
    cells_filled: int
    best_speedup: float | None


@dataclass(frozen=True)
class LineageStep:
    """One candidate on the best kernel's parent chain: what made it and how it fared."""

    candidate_id: str
    iteration: int
    generator: str
    operator: str  # the mutation operator (empty for a seed)
    parent_ids: tuple[str, ...]
    descriptors: Descriptors | None
    speedup: float | None
    runtime_ms: float | None
    outcome: str  # correct, a failure reason, or NOT_EVALUATED
    repair_of: str


@dataclass(frozen=True)
class Baselines:
    """Eager and torch.compile beside the best kernel, all in milliseconds (pooled over the run)."""

    eager: PooledBaseline | None
    compiled: PooledBaseline | None
    figure: RunSpeedup | None

    @property
    def speedup_vs_compile(self) -> float | None:
        """The best kernel against the pooled torch.compile median (None without either)."""
        if self.figure is None or self.compiled is None or self.figure.kernel_ms <= 0:
            return None
        return self.compiled.median_ms / self.figure.kernel_ms


@dataclass(frozen=True)
class BestSource:
    candidate_id: str
    language: str
    entry_point: str
    code: str
    glue: str
    params: Mapping[str, int | str]


@dataclass(frozen=True)
class RunFacts:
    run_id: str
    task_name: str
    hardware: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    settings: Mapping[str, Any]  # the run's configuration, its task left out


@dataclass(frozen=True)
class Counts:
    candidates: int
    builds: int
    builds_failed: int
    evaluations: int
    evaluations_correct: int


@dataclass(frozen=True)
class RunReport:
    run: RunFacts
    counts: Counts
    curve: tuple[CurvePoint, ...]
    archive: tuple[ArchiveCell, ...]
    coverage: tuple[CoveragePoint, ...]
    lineage: tuple[LineageStep, ...]  # the best kernel first, then its parent, its parent's parent, ...
    failures: tuple[FailureCount, ...]
    baselines: Baselines
    best: BestSource | None
    cell_count: int = CELL_COUNT
    levels: int = LEVELS

    @property
    def best_speedup(self) -> float | None:
        figure = self.baselines.figure
        return None if figure is None else figure.speedup


def _speedups(
    evaluations: Sequence[EvaluationRecord], eager: PooledBaseline | None
) -> dict[str, float | None]:
    return {e.candidate_id: kernel_speedup(e.runtime_ms, eager) if e.correct else None for e in evaluations}


def speedup_curve(
    evaluations: Sequence[EvaluationRecord],
    eager: PooledBaseline | None,
    iteration_of: Mapping[str, int] | None = None,
) -> list[CurvePoint]:
    """The run's evaluations in order with each kernel's speedup and the best so far."""
    points: list[CurvePoint] = []
    best: float | None = None
    iteration_of = iteration_of or {}
    for record in evaluations:
        if retimed_candidate(record.candidate_id) is not None:
            continue
        speedup = kernel_speedup(record.runtime_ms, eager) if record.correct else None
        if speedup is not None and (best is None or speedup > best):
            best = speedup
        points.append(
            CurvePoint(
                index=len(points) + 1,
                candidate_id=record.candidate_id,
                iteration=iteration_of.get(record.candidate_id, 0),
                speedup=speedup,
                best_so_far=best,
                reason="" if record.correct else (record.reason or "incorrect"),
            )
        )
    return points


def _cell(
    document: Mapping[str, Any], eager: PooledBaseline | None, runtimes: Mapping[str, float | None]
) -> ArchiveCell | None:
    """A stored cell; its speedup over the run's pooled eager median, as everywhere in the report (the
    cell's stored figure used the pool as it stood when the elite entered), from the elite's evaluated time
    (or the cell's own); the stored figure only when neither time is known."""
    try:
        descriptors = Descriptors(*(int(document[axis]) for axis in AXES))
        stored = float(document.get("speedup") or 0.0)
    except (KeyError, TypeError, ValueError):
        return None
    candidate_id = str(document.get("candidate_id", ""))
    runtime = runtimes.get(candidate_id) or document.get("runtime_ms")
    runtime_ms = float(runtime) if isinstance(runtime, int | float) and runtime > 0 else None
    speedup = kernel_speedup(runtime_ms, eager)
    if speedup is None and not math.isfinite(stored):
        return None  # no figure to draw or rank by
    return ArchiveCell(
        descriptors=descriptors,
        candidate_id=candidate_id,
        speedup=stored if speedup is None else speedup,
        runtime_ms=runtime_ms,
    )


def _cells(
    snapshot: ArchiveSnapshot, eager: PooledBaseline | None, runtimes: Mapping[str, float | None]
) -> list[ArchiveCell]:
    cells = (_cell(document, eager, runtimes) for document in snapshot.cells)
    return sorted((c for c in cells if c is not None), key=lambda c: c.descriptors.cell)


def final_archive(
    snapshots: Sequence[ArchiveSnapshot],
    eager: PooledBaseline | None = None,
    runtimes: Mapping[str, float | None] | None = None,
) -> list[ArchiveCell]:
    """The cells of the run's last snapshot (by iteration, then time)."""
    if not snapshots:
        return []
    last = max(snapshots, key=lambda s: (s.iteration, s.taken_at))
    return _cells(last, eager, runtimes or {})


def coverage(
    snapshots: Sequence[ArchiveSnapshot],
    eager: PooledBaseline | None = None,
    runtimes: Mapping[str, float | None] | None = None,
) -> list[CoveragePoint]:
    """Per iteration, the archive as that iteration's last snapshot left it."""
    last: dict[int, ArchiveSnapshot] = {}
    for snapshot in sorted(snapshots, key=lambda s: (s.iteration, s.taken_at)):
        last[snapshot.iteration] = snapshot
    points = []
    for iteration in sorted(last):
        cells = _cells(last[iteration], eager, runtimes or {})
        best = max((c.speedup for c in cells), default=None)
        points.append(CoveragePoint(iteration, len(cells), best))
    return points


def failure_counts(
    builds: Iterable[BuildRecord], evaluations: Iterable[EvaluationRecord]
) -> list[FailureCount]:
    """Failed builds and incorrect evaluations by (stage, reason), most frequent first (as the store
    counts them)."""
    counted: Counter[tuple[str, str]] = Counter()
    for build in builds:
        if not build.ok:
            counted[("build", build.reason)] += 1
    for evaluation in evaluations:
        if not evaluation.correct:
            counted[("evaluation", evaluation.reason)] += 1
    ordered = sorted(counted.items(), key=lambda item: (-item[1], item[0]))
    return [FailureCount(stage, reason, count) for (stage, reason), count in ordered]


def parent_chain(
    best_id: str,
    candidates: Mapping[str, CandidateRecord],
    outcomes: Mapping[str, str],
    speedups: Mapping[str, float | None],
    runtimes: Mapping[str, float | None],
) -> list[LineageStep]:
    """From the best kernel back to its seed, through each candidate's first parent (its primary one);
    every parent is listed on its step. Stops at a parent the run does not hold, or at a cycle."""
    chain: list[LineageStep] = []
    seen: set[str] = set()
    current: str | None = best_id
    while current is not None and current in candidates and current not in seen:
        seen.add(current)
        record = candidates[current]
        chain.append(
            LineageStep(
                candidate_id=record.candidate_id,
                iteration=record.iteration,
                generator=record.generator,
                operator=record.mutation,
                parent_ids=record.parent_ids,
                descriptors=record.analysed or record.self_reported,
                speedup=speedups.get(current),
                runtime_ms=runtimes.get(current),
                outcome=outcomes.get(current, NOT_EVALUATED),
                repair_of=record.repair_of,
            )
        )
        current = record.parent_ids[0] if record.parent_ids else None
    return chain


def _outcomes(builds: Iterable[BuildRecord], evaluations: Iterable[EvaluationRecord]) -> dict[str, str]:
    outcome: dict[str, str] = {}
    for build in builds:
        if not build.ok:
            outcome[build.candidate_id] = f"build: {build.reason or 'failed'}"
    for evaluation in evaluations:
        if retimed_candidate(evaluation.candidate_id) is None:
            outcome[evaluation.candidate_id] = (
                "correct" if evaluation.correct else (evaluation.reason or "incorrect")
            )
    return outcome


def build_report(
    run: RunRecord,
    candidates: Sequence[CandidateRecord],
    builds: Sequence[BuildRecord],
    evaluations: Sequence[EvaluationRecord],
    snapshots: Sequence[ArchiveSnapshot],
) -> RunReport:
    """Every section of the report of `run` from its records (each list in the store's order)."""
    measurements = [measurement_of(e) for e in evaluations]
    eager = pool_baseline(m.baseline_ms for m in measurements)
    compiled = pool_baseline(m.compile_baseline_ms for m in measurements)
    figure = run_speedup(measurements)
    by_id = {c.candidate_id: c for c in candidates}
    speedups = _speedups(evaluations, eager)
    runtimes = {e.candidate_id: e.runtime_ms for e in evaluations if e.correct}
    curve = speedup_curve(evaluations, eager, {c.candidate_id: c.iteration for c in candidates})
    lineage: list[LineageStep] = []
    best: BestSource | None = None
    if figure is not None:
        lineage = parent_chain(figure.candidate_id, by_id, _outcomes(builds, evaluations), speedups, runtimes)
        record = by_id.get(figure.candidate_id)
        if record is not None:
            best = BestSource(
                candidate_id=record.candidate_id,
                language=record.language,
                entry_point=record.entry_point,
                code=record.code,
                glue=record.glue,
                params=dict(record.params),
            )
    return RunReport(
        run=RunFacts(
            run_id=run.run_id,
            task_name=run.task_name,
            hardware=run.hardware,
            status=run.status,
            created_at=run.created_at,
            finished_at=run.finished_at,
            settings={k: v for k, v in run.config.items() if k != "task"},
        ),
        counts=Counts(
            candidates=len(candidates),
            builds=len(builds),
            builds_failed=sum(1 for b in builds if not b.ok),
            evaluations=len(evaluations),
            evaluations_correct=sum(1 for e in evaluations if e.correct),
        ),
        curve=tuple(curve),
        archive=tuple(final_archive(snapshots, eager, runtimes)),
        coverage=tuple(coverage(snapshots, eager, runtimes)),
        lineage=tuple(lineage),
        failures=tuple(failure_counts(builds, evaluations)),
        baselines=Baselines(eager=eager, compiled=compiled, figure=figure),
        best=best,
    )
