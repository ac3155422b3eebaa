"""The messages the evolver sends, built from a run's state and the engine's plans.

Pure construction (no state changes, no I/O): the coordinator (kernelfoundry.services.evolver.runs)
decides what to send and when; this module decides what each message holds, and its subject and
de-duplication id (the bus drops a second message with the same id).
"""

from __future__ import annotations

from kernelfoundry.bus import subjects
from kernelfoundry.bus.protocol import Outgoing
from kernelfoundry.codec import descriptors_to_proto, kernel_to_proto, run_config_to_proto, task_to_proto
from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.engine import GenerationPlan
from kernelfoundry.domain.evaluation import CandidateInfo
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.domain.speedup import pool_baseline
from kernelfoundry.services.evolver.state import RETIME_OPERATOR, CandidateState, RunState
from kernelfoundry.v1 import build_pb2, run_pb2, search_pb2

INSPIRATIONS = 2  # elites of other cells sent with a mutation or seed request


def merge_seed_plans(plans: list[GenerationPlan]) -> list[tuple[GenerationPlan, int]]:
    """Seed plans of one island and prompt variant become one request for that many candidates.

    Asked separately, a generator would propose its best seed each time and the copies would be dropped
    as duplicates; asked for n at once, it proposes n different starting points (direct translation,
    fused, ...). Mutation and repair plans stay one request each.
    """
    merged: list[tuple[GenerationPlan, int]] = []
    seeds: dict[tuple[int, str], int] = {}
    for plan in plans:
        if plan.parent is None and plan.repair is None:
            key = (plan.island, plan.prompt_variant_id or "")
            if key in seeds:
                first, count = merged[seeds[key]]
                merged[seeds[key]] = (first, count + 1)
                continue
            seeds[key] = len(merged)
        merged.append((plan, 1))
    return merged


def run_submitted(run: RunState) -> Outgoing:
    submitted = run_pb2.RunSubmitted(
        run_id=run.run_id,
        task=task_to_proto(run.task),
        config=run_config_to_proto(run.config),
        submitted_at=run.started_at,
    )
    return Outgoing(subjects.RUN_SUBMITTED, submitted, f"submitted-{run.run_id}")


def generation_request(
    run: RunState, plan: GenerationPlan, request_id: str, count: int, seed: int
) -> Outgoing:
    """Ask the run's generator for `count` candidates of one plan: its parent's or failed kernel's source
    and last result with the run's eager (and torch.compile) time, the island's best kernels of other
    cells, and the device."""
    request = search_pb2.GenerateCandidates(
        request_id=request_id,
        run_id=run.run_id,
        task=task_to_proto(run.task),
        backend=run.config.backend,
        mutation=plan.operator if (plan.parent or plan.repair) else "",
        hints=list(plan.hints),
        guidance=dict(plan.guidance),
        proposal_weights=dict(plan.proposal_weights),
        count=count,
        seed=seed,
        repair=plan.repair is not None,
        iteration=run.generation,
        prompt_variant_id=plan.prompt_variant_id or "",
        generator=run.config.generator,
        island=plan.island,
        inspirations=inspirations(run, plan),
        hardware=run.config.hardware,
        build_target=run.build_target,
        member_record={
            name: search_pb2.MemberRecord(
                evaluated=r.evaluated, correct=r.correct, improvements=r.improvements
            )
            for name, r in run.member_record().items()
        },
    )
    source_id = (
        plan.repair.candidate_id if plan.repair else (plan.parent.candidate_id if plan.parent else None)
    )
    if source_id and source_id in run.candidates:
        parent = run.candidates[source_id]
        evaluation = parent.evaluation
        eager = pool_baseline(m.baseline_ms for m in run.measurements)
        compiled = pool_baseline(m.compile_baseline_ms for m in run.measurements)
        request.parent.CopyFrom(
            search_pb2.ParentKernel(
                candidate_id=source_id,
                source=kernel_to_proto(parent.source),
                descriptors=descriptors_to_proto(parent.info.descriptors),
                speedup=evaluation.speedup if evaluation else 0.0,
                runtime_ms=evaluation.runtime_ms if evaluation else 0.0,
                feedback=plan.repair.feedback if plan.repair else "",
                eager_ms=eager.median_ms if eager else 0.0,
                compile_ms=compiled.median_ms if compiled else 0.0,
                roofline_fraction=evaluation.roofline_fraction if evaluation else 0.0,
                bound=evaluation.bound if evaluation else "",
            )
        )
    return Outgoing(subjects.generate(run.config.generator), request, request_id)


def inspirations(
    run: RunState, plan: GenerationPlan, limit: int = INSPIRATIONS
) -> list[search_pb2.InspirationKernel]:
    """The fastest elites of the plan's island in other cells than its parent's: what worked elsewhere
    in the archive, for a generator to borrow from. None for a repair (the fix is the only change asked)."""
    if plan.repair is not None:
        return []
    parent_cell = plan.parent.cell if plan.parent is not None else None
    elites = [
        e
        for e in run.engine.islands.archive(plan.island).elites()
        if e.cell != parent_cell and e.candidate_id in run.candidates
    ]
    elites.sort(key=lambda e: (-e.speedup, e.cell))
    out = []
    for elite in elites[:limit]:
        state = run.candidates[elite.candidate_id]
        evaluation = state.evaluation
        out.append(
            search_pb2.InspirationKernel(
                candidate_id=elite.candidate_id,
                source=kernel_to_proto(state.source),
                descriptors=descriptors_to_proto(state.info.descriptors),
                speedup=elite.speedup,
                runtime_ms=evaluation.runtime_ms if evaluation else 0.0,
            )
        )
    return out


def candidate_created(
    run: RunState,
    info: CandidateInfo,
    source: KernelSource,
    *,
    request_id: str,
    rationale: str,
    generator: str = "",
) -> Outgoing:
    """The lineage event of a new candidate (the store records it)."""
    created = search_pb2.CandidateCreated(
        candidate_id=info.candidate_id,
        run_id=run.run_id,
        parent_ids=[info.parent_id] if info.parent_id else [],
        iteration=info.generation,
        generator=generator or run.config.generator,
        source=kernel_to_proto(source),
        analysed=descriptors_to_proto(info.descriptors),
        mutation=info.operator,
        prompt_variant_id=info.prompt_variant_id or "",
        island=info.island,
        request_id=request_id,
        rationale=rationale,
        hardware=run.config.hardware,
        repair_of=info.repair_of or "",
    )
    reported: Descriptors | None = info.reported
    if reported is not None:
        created.self_reported.CopyFrom(descriptors_to_proto(reported))
    return Outgoing(subjects.CANDIDATE_CREATED, created, f"created-{info.candidate_id}")


def compile_request(
    run: RunState, candidate_id: str, source: KernelSource, *, screen: bool = False
) -> Outgoing:
    """Build (then evaluate) a candidate; `screen`: evaluated with a screen against its cell's elite."""
    request = build_pb2.CompileCandidate(
        candidate_id=candidate_id,
        run_id=run.run_id,
        source=kernel_to_proto(source),
        build_target=run.build_target,
        execute_hardware=run.config.hardware,
        task=task_to_proto(run.task),
        screen_above_ms=run.time_to_beat(candidate_id) if screen else 0.0,
    )
    return Outgoing(subjects.compile_(run.build_target), request, f"compile-{candidate_id}")


def retime_messages(run: RunState, best: CandidateState) -> list[Outgoing]:
    """The best kernel's re-time (candidate `run.retime_id`): recorded as a candidate of its own (a child
    of the best, operator "retime"), so that the lineage holds every evaluation's candidate and the
    figure can be recomputed from it, then built and evaluated like any other."""
    created = search_pb2.CandidateCreated(
        candidate_id=run.retime_id,
        run_id=run.run_id,
        parent_ids=[run.best_id],
        iteration=best.info.generation,
        generator=run.config.generator,
        source=kernel_to_proto(best.source),
        analysed=descriptors_to_proto(best.info.descriptors),
        mutation=RETIME_OPERATOR,
        island=best.info.island,
        request_id=run.retime_id,
        rationale="the best kernel evaluated again, eager timed beside it, before the run ends",
        hardware=run.config.hardware,
    )
    return [
        Outgoing(subjects.CANDIDATE_CREATED, created, f"created-{run.retime_id}"),
        compile_request(run, run.retime_id, best.source),
    ]


def archive_updated(
    run: RunState, candidate_id: str, outcome: str, cells: list[run_pb2.ArchiveCell]
) -> Outgoing:
    candidate = run.candidates.get(candidate_id)
    archive = run_pb2.ArchiveUpdated(
        run_id=run.run_id,
        iteration=run.generation,
        cells=cells,
        outcome=outcome,
        candidate_id=candidate_id,
        generator=candidate.generator if candidate is not None else "",
        pool=run.config.generator,
    )
    return Outgoing(subjects.ARCHIVE_UPDATED, archive, f"archive-{candidate_id}")


def run_finished(run: RunState, progress: run_pb2.RunProgress) -> Outgoing:
    assert run.finished_at is not None
    finished = run_pb2.RunFinished(
        run_id=run.run_id, status=run.status, progress=progress, finished_at=run.finished_at
    )
    return Outgoing(subjects.RUN_FINISHED, finished, f"finished-{run.run_id}")
