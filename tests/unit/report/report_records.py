"""A small run's lineage records, as the store keeps them, for the report's unit tests.

run-r1 (relu, cpu.x86_64, finished): s1 (seed, 1.0x) -> m1 (vectorize, 2.0x) -> m2 (tiling, 4.0x, the best,
re-timed at 2.5 ms against eager 10 ms); m1 -> f1 fails to build (compile_error); m2 -> w1 is wrong
(output_mismatch); m2's re-time is a candidate of its own (operator retime), as the evolver records it.
Eager is timed at 10 ms beside each kernel, torch.compile at 5 ms.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.speedup import retime_id
from kernelfoundry.lineage.records import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    RunRecord,
)

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
EAGER_MS = 10.0
COMPILE_MS = 5.0
BEST = "m2"
RETIMED_MS = 2.5
BEST_CODE = '#include "kf_abi.h"\n// best <kernel> & "friends"\nint kf_forward() { return 0; }\n'


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


RUN_ID = "run-r1"


def run(status: str = "finished") -> RunRecord:
    return RunRecord(
        run_id=RUN_ID,
        task_name="relu<script>",
        hardware="cpu.x86_64",
        status=status,
        config={"iterations": 2, "population": 2, "task": {"name": "relu"}},
        created_at=at(0),
        finished_at=at(9) if status == "finished" else None,
    )


def _candidate(cid: str, parents: tuple[str, ...], iteration: int, mutation: str, d: Descriptors):
    return CandidateRecord(
        candidate_id=cid,
        run_id=RUN_ID,
        parent_ids=parents,
        iteration=iteration,
        generator="heuristic",
        language="cpp",
        code=BEST_CODE if cid == BEST else f"// {cid}\n",
        params={"BLOCK": 64},
        analysed=d,
        mutation=mutation,
        created_at=at(iteration + len(cid) / 10),
    )


def candidates() -> list[CandidateRecord]:
    return [
        _candidate("s1", (), 0, "", Descriptors(0, 0, 0)),
        _candidate("m1", ("s1",), 1, "vectorize", Descriptors(1, 0, 0)),
        _candidate("f1", ("m1",), 1, "tiling", Descriptors(2, 0, 0)),
        _candidate("m2", ("m1",), 2, "tiling", Descriptors(2, 1, 1)),
        _candidate("w1", ("m2",), 2, "fusion", Descriptors(2, 2, 1)),
        _candidate(retime_id(BEST, "t1"), (BEST,), 2, "retime", Descriptors(2, 1, 1)),
    ]


def builds() -> list[BuildRecord]:
    return [
        BuildRecord(
            candidate_id=c.candidate_id,
            run_id=RUN_ID,
            target="cpu.x86_64",
            ok=c.candidate_id != "f1",
            reason="compile_error" if c.candidate_id == "f1" else "",
            created_at=at(i + 0.5),
        )
        for i, c in enumerate(candidates())
    ]


def _evaluation(
    cid: str, runtime_ms: float | None, minute: float, reason: str = "", compile_ms: float = COMPILE_MS
):
    return EvaluationRecord(
        candidate_id=cid,
        run_id=RUN_ID,
        hardware="cpu.x86_64",
        correct=runtime_ms is not None,
        reason=reason,
        runtime_ms=runtime_ms,
        baseline_ms=EAGER_MS,
        compile_baseline_ms=compile_ms,
        speedup=None if runtime_ms is None else EAGER_MS / runtime_ms,
        evaluated_at=at(minute),
    )


def evaluations() -> list[EvaluationRecord]:
    return [
        _evaluation("s1", 10.0, 1),
        _evaluation("m1", 5.0, 2),
        _evaluation("m2", 2.4, 3),
        _evaluation("w1", None, 4, "output_mismatch"),
        _evaluation(retime_id(BEST, "t1"), RETIMED_MS, 5),
    ]


def _cell(cid: str, d: Descriptors, speedup: float) -> dict[str, Any]:
    return {**d.as_dict(), "candidate_id": cid, "speedup": speedup, "runtime_ms": EAGER_MS / speedup}


def snapshots() -> list[ArchiveSnapshot]:
    first = (_cell("s1", Descriptors(0, 0, 0), 1.0), _cell("m1", Descriptors(1, 0, 0), 2.0))
    return [
        ArchiveSnapshot(run_id=RUN_ID, iteration=0, taken_at=at(1.5), cells=first[:1]),
        ArchiveSnapshot(run_id=RUN_ID, iteration=1, taken_at=at(2.5), cells=first),
        ArchiveSnapshot(
            run_id=RUN_ID,
            iteration=2,
            taken_at=at(3.5),
            candidate_id="m2",
            outcome="new_cell",
            cells=(*first, _cell("m2", Descriptors(2, 1, 1), EAGER_MS / 2.4)),
        ),
    ]
