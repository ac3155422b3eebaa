"""A small, hand-made lineage used by the contract suite: three runs, a diamond of candidates, failures.

run-a (matmul, h200): c1 -> c2, c3 -> c4 (parents c2 and c3) -> c5; c3 fails to build, c4 is wrong.
run-b (matmul, h200): b1 (the fastest matmul on h200) -> b2 (timeout).
run-c (softmax, x86_64): s1, which fails to build.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.lineage import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    LineageRepository,
    RetentionPolicy,
    RunRecord,
    UsageRecord,
)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
RETENTION = RetentionPolicy(max_blob_bytes=4096, blob_ttl=timedelta(days=7))

RepositoryFactory = Callable[[str], Awaitable[LineageRepository]]


@dataclass(frozen=True)
class Sample:
    runs: tuple[RunRecord, ...]
    candidates: tuple[CandidateRecord, ...]
    builds: tuple[BuildRecord, ...]
    evaluations: tuple[EvaluationRecord, ...]
    snapshots: tuple[ArchiveSnapshot, ...]
    usage: tuple[UsageRecord, ...]


def minutes(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


def candidate(cid: str, run_id: str, parents: tuple[str, ...], iteration: int, at: float) -> CandidateRecord:
    return CandidateRecord(
        candidate_id=cid,
        run_id=run_id,
        parent_ids=parents,
        iteration=iteration,
        generator="heuristic" if iteration == 0 else "openai",
        language="cuda",
        code=f'#include "kf_abi.h"\n// kernel {cid}\n',
        glue="" if iteration % 2 == 0 else f"class ModelNew:  # {cid}\n    pass\n",
        params={"BLOCK_SIZE": 128 * (iteration + 1), "LAYOUT": "row"},
        self_reported=Descriptors(1, 1, 1),
        analysed=Descriptors(1, 0, iteration % 4),
        prompt_variant_id="pv-1",
        mutation="tile" if parents else "",
        island=iteration % 2,
        created_at=minutes(at),
    )


def evaluation(cid: str, run_id: str, hardware: str, speedup: float | None, at: float, reason: str = ""):
    correct = speedup is not None
    return EvaluationRecord(
        candidate_id=cid,
        run_id=run_id,
        hardware=hardware,
        correct=correct,
        reason=reason,
        message="" if correct else f"{reason} in {cid}",
        runtime_ms=(2.0 / speedup) if correct else None,
        baseline_ms=2.0,
        compile_baseline_ms=1.8,
        speedup=speedup,
        max_abs_error=1e-6 if correct else 0.5,
        details={"shapes": ["default"], "seeds": 3},
        evaluated_at=minutes(at),
    )


def build(cid: str, run_id: str, ok: bool, at: float, reason: str = "", log: str = "ok") -> BuildRecord:
    return BuildRecord(
        candidate_id=cid,
        run_id=run_id,
        target="cuda.sm90",
        ok=ok,
        reason=reason,
        log=log,
        duration_s=1.25,
        artifact=f"artifacts/{cid}.so" if ok else "",
        cache_hit=False,
        created_at=minutes(at),
    )


def make_sample() -> Sample:
    runs = (
        RunRecord(
            run_id="run-a",
            task_name="matmul",
            task_source="tasks/matmul",
            config={"iterations": 4, "islands": 2, "targets": ["cuda.h200"]},
            hardware="h200",
            created_at=minutes(0),
        ),
        RunRecord(run_id="run-b", task_name="matmul", hardware="h200", created_at=minutes(60)),
        RunRecord(run_id="run-c", task_name="softmax", hardware="x86_64", created_at=minutes(30)),
    )
    # run-a: c1 -> c2, c3 -> c4 (a diamond) -> c5
    candidates = (
        candidate("c1", "run-a", (), 0, 1),
        candidate("c2", "run-a", ("c1",), 1, 2),
        candidate("c3", "run-a", ("c1",), 1, 2),
        candidate("c4", "run-a", ("c2", "c3"), 2, 3),
        candidate("c5", "run-a", ("c4",), 3, 4),
        candidate("b1", "run-b", (), 0, 61),
        candidate("b2", "run-b", ("b1",), 1, 62),
        candidate("s1", "run-c", (), 0, 31),
    )
    builds = (
        build("c1", "run-a", True, 1.1),
        build("c2", "run-a", True, 2.1),
        build("c3", "run-a", False, 2.2, "compile_error", "error: " + "x" * 10_000),
        build("c4", "run-a", True, 3.1),
        build("c5", "run-a", True, 4.1),
        build("b1", "run-b", True, 61.1),
        build("b2", "run-b", True, 62.1),
        build("s1", "run-c", False, 31.1, "compile_error", "error: no member"),
    )
    evaluations = (
        evaluation("c1", "run-a", "h200", 1.0, 1.5),
        evaluation("c2", "run-a", "h200", 1.5, 2.5),
        evaluation("c4", "run-a", "h200", None, 3.5, "output_mismatch"),
        evaluation("c5", "run-a", "h200", 2.5, 4.5),
        evaluation("c5", "run-a", "a100", 1.7, 4.6),
        evaluation("b1", "run-b", "h200", 3.0, 61.5),
        evaluation("b2", "run-b", "h200", None, 62.5, "timeout"),
    )
    per_iteration = tuple(
        ArchiveSnapshot(
            run_id="run-a",
            iteration=i,
            taken_at=minutes(10 + i),
            cells=tuple(
                {"cell": [1, 0, j], "candidate_id": f"c{j + 1}", "speedup": 1.0 + j} for j in range(i + 1)
            ),
        )
        for i in range(4)
    )
    snapshots = (
        *per_iteration,
        ArchiveSnapshot(
            run_id="run-a",
            iteration=3,
            candidate_id="c5",
            outcome="improved",
            taken_at=minutes(13.5),
            cells=({"cell": [1, 0, 3], "candidate_id": "c5", "speedup": 2.5},),
        ),
    )
    usage = (
        UsageRecord(
            usage_id="u1",
            run_id="run-a",
            generator="openai",
            prompt_tokens=100,
            completion_tokens=50,
            cost_usd=0.25,
            recorded_at=minutes(2),
        ),
        UsageRecord(
            usage_id="u2",
            run_id="run-a",
            generator="openai",
            prompt_tokens=200,
            completion_tokens=70,
            cost_usd=0.5,
            recorded_at=minutes(3),
        ),
        UsageRecord(
            usage_id="u3",
            run_id="run-a",
            generator="heuristic",
            prompt_tokens=0,
            completion_tokens=0,
            cost_usd=0.0,
            recorded_at=minutes(3),
        ),
        UsageRecord(
            usage_id="u4",
            run_id="run-b",
            generator="openai",
            prompt_tokens=10,
            completion_tokens=5,
            cost_usd=0.125,
            recorded_at=minutes(61),
        ),
    )
    return Sample(runs, candidates, builds, evaluations, snapshots, usage)


async def store_sample(repository: LineageRepository, sample: Sample) -> None:
    for run in sample.runs:
        await repository.save_run(run)
    for record in sample.candidates:
        await repository.save_candidate(record)
    for record in sample.builds:
        await repository.save_build(record)
    for record in sample.evaluations:
        await repository.save_evaluation(record)
    for record in sample.snapshots:
        await repository.save_snapshot(record)
    for record in sample.usage:
        await repository.save_usage(record)
    for i, record in enumerate(sample.candidates):
        await repository.record_event(
            f"evt-{record.candidate_id}",
            "candidate.generated",
            record.run_id,
            {"candidate_id": record.candidate_id, "order": i},
            recorded_at=record.created_at,
        )
