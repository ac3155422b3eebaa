"""The evolver's run coordinator: turns events into engine calls and engine plans into messages.

Service layer: no NATS or gRPC here (handlers return the messages to publish), no search policy either
(that is the pure EvolutionEngine in kernelfoundry.domain). Idempotent by construction: candidate ids
are derived from request ids, and every event for a candidate already resolved is ignored.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from kernelfoundry.bus import subjects
from kernelfoundry.bus.jetstream import Outgoing
from kernelfoundry.codec import descriptors_to_proto, kernel_from_proto, kernel_to_proto
from kernelfoundry.domain.archive import Elite
from kernelfoundry.domain.descriptors import Descriptors, classify
from kernelfoundry.domain.engine import EngineConfig, EvolutionEngine, GenerationPlan
from kernelfoundry.domain.evaluation import CandidateInfo, EvaluationInfo, Mismatch
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.domain.outcomes import Outcome
from kernelfoundry.domain.speedup import (
    Measurement,
    RunSpeedup,
    fastest,
    kernel_speedup,
    pool_baseline,
    retime_id,
    run_speedup,
)
from kernelfoundry.domain.sweeps import SweepCampaign, SweepFailure, SweepJob
from kernelfoundry.tasks.model import Budget, Task, TaskError
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2, task_pb2

log = get_logger(__name__)

EXTENSIONS = {"cpp": "cpp", "cuda": "cu"}
DEFAULT_BUILD_TARGETS = {"cuda.h200": "cuda.sm90", "cuda.h100": "cuda.sm90", "cuda.a100": "cuda.sm80"}
# Placements after which an elite's tunables are worth sweeping.
SWEEP_TRIGGERS = ("new_cell", "elite_replaced", "improvement")
# Sweep only kernels within this fraction of the run's best: a setting rarely moves a kernel further, and
# every sweep point is an evaluation the search could have spent elsewhere.
SWEEP_NEAR_BEST = 0.75
ALL_SHAPES = "all"  # evaluations aggregate every shape of the task; sweeps tune for that aggregate
RETIME_OPERATOR = "retime"  # the lineage operator of a best kernel's re-time (kernelfoundry.domain.speedup)


@dataclass
class CandidateState:
    info: CandidateInfo
    source: KernelSource
    created_at: float
    compiled: bool = False
    resolved: bool = False
    evaluation: evaluation_pb2.EvaluationFinished | None = None
    build_flags: tuple[str, ...] = ()


@dataclass
class RunState:
    run_id: str
    task: Task
    task_proto: task_pb2.Task
    config: run_pb2.RunConfig
    build_target: str
    engine: EvolutionEngine
    reference_ops: int
    rng: random.Random
    sweeps: SweepCampaign
    sweep_jobs: dict[str, SweepJob] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    status: int = run_pb2.RUN_STATUS_RUNNING
    generation: int = 0
    pending_requests: set[str] = field(default_factory=set)
    handled_requests: set[str] = field(default_factory=set)
    candidates: dict[str, CandidateState] = field(default_factory=dict)
    source_hashes: dict[str, str] = field(default_factory=dict)  # source digest -> candidate id
    generated: int = 0
    compiled: int = 0
    correct: int = 0
    failed: int = 0
    best_id: str = ""
    best_speedup: float = 0.0
    best_path: str = ""
    message: str = ""
    finished_at: float | None = None
    listeners: list[asyncio.Queue[run_pb2.RunProgress]] = field(default_factory=list)
    # Every evaluation's timings, in arrival order: the run's speedup is computed from these alone.
    measurements: list[Measurement] = field(default_factory=list)
    # The re-time of the best kernel before the run ends (kernelfoundry.domain.speedup).
    retime_id: str = ""
    retime_done: bool = False
    finish_message: str = ""
    # Why generation requests failed (reason -> first message), to explain a run without candidates.
    generation_errors: dict[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.status == run_pb2.RUN_STATUS_RUNNING

    def unresolved(self) -> int:
        return sum(1 for c in self.candidates.values() if not c.resolved)


def source_digest(source: KernelSource) -> str:
    h = hashlib.sha256()
    h.update(source.language.encode())
    h.update(source.code.encode())
    h.update(source.glue.encode())
    h.update(repr(sorted(source.defines().items())).encode())
    return h.hexdigest()


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


class RunCoordinator:
    """All runs of this evolver process."""

    def __init__(
        self,
        state_dir: Path,
        clock: Callable[[], float] = time.time,
        build_targets: dict[str, str] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.clock = clock
        self.build_targets = dict(build_targets or {})
        self.runs: dict[str, RunState] = {}

    # -- starting ---------------------------------------------------------------------------------------
    def build_target_for(self, hardware: str) -> str:
        """The compiler subject token for an execution hardware token (configuration, not code)."""
        if hardware in self.build_targets:
            return self.build_targets[hardware]
        if hardware.startswith("cpu."):
            return hardware
        if hardware in DEFAULT_BUILD_TARGETS:
            return DEFAULT_BUILD_TARGETS[hardware]
        raise TaskError("unknown_hardware", f"no build target is configured for hardware {hardware!r}")

    def create_run(
        self,
        run_id: str,
        task: Task,
        task_proto: task_pb2.Task,
        config: run_pb2.RunConfig,
        build_target: str,
        reference_ops: int,
        started_at: float | None = None,
    ) -> RunState:
        """Register a run's state (new or restored); emits nothing."""
        started = self.clock() if started_at is None else started_at
        budget = Budget(
            iterations=config.iterations,
            wall_time_s=task.budget.wall_time_s,
            evaluations=task.budget.evaluations,
            patience=task.budget.patience,
        )
        engine = EvolutionEngine(
            EngineConfig(batch_size=max(1, config.population), islands=max(1, config.islands)),
            budget=budget,
            started_at=started,
        )
        run = RunState(
            run_id=run_id,
            task=task,
            task_proto=task_proto,
            config=config,
            build_target=build_target,
            engine=engine,
            reference_ops=reference_ops,
            rng=random.Random(config.seed),
            sweeps=SweepCampaign(task.name),
            started_at=started,
        )
        self.runs[run_id] = run
        return run

    def start_run(
        self,
        run_id: str,
        task: Task,
        task_proto: task_pb2.Task,
        config: run_pb2.RunConfig,
        build_target: str,
        reference_ops: int,
    ) -> list[Outgoing]:
        run = self.create_run(run_id, task, task_proto, config, build_target, reference_ops)
        submitted = run_pb2.RunSubmitted(
            run_id=run_id, task=task_proto, config=config, submitted_at=run.started_at
        )
        out = [Outgoing(subjects.RUN_SUBMITTED, submitted, f"submitted-{run_id}")]
        out += self._seed_initial_kernels(run)
        out += self._next_generation(run)
        self._notify(run)
        return out

    def continue_run(self, run: RunState) -> list[Outgoing]:
        """After a restore: move on if nothing is in flight, else wait for the in-flight work's events."""
        out = [] if run.unresolved() else self._next_generation(run)
        self._notify(run)
        return out

    def _seed_initial_kernels(self, run: RunState) -> list[Outgoing]:
        out: list[Outgoing] = []
        for i, kernel in enumerate(run.task.initial_kernels):
            if kernel.language != self._language(run):
                continue
            out += self._accept_candidate(
                run,
                candidate_id=f"{run.run_id}-init{i}",
                source=kernel,
                reported=None,
                parent_id=None,
                operator="seed",
                request_id=f"{run.run_id}-init",
                rationale="initial kernel from the task",
            )
        return out

    def _language(self, run: RunState) -> str:
        return "cuda" if run.config.hardware.startswith("cuda") else "cpp"

    # -- generation -------------------------------------------------------------------------------------
    def _next_generation(self, run: RunState) -> list[Outgoing]:
        now = self.clock()
        decision = run.engine.stop(now)
        if decision:
            return self._conclude(run, f"budget reached: {decision.reason}")
        plans = run.engine.plan_generation(now, run.rng)
        jobs = self._sweep_jobs(run) if run.config.sweeps else []
        if not plans and not jobs:
            return self._conclude(run, "nothing left to try")
        run.generation = run.engine.generation
        out: list[Outgoing] = []
        for index, (plan, count) in enumerate(merge_seed_plans(plans)):
            out.append(self._generation_request(run, plan, f"{run.run_id}-g{run.generation}-r{index}", count))
        for index, (job, source) in enumerate(jobs):
            out += self._sweep_candidate(run, job, source, f"{run.run_id}-g{run.generation}-s{index}")
        if not run.pending_requests and run.unresolved() == 0:
            # Every sweep point was a duplicate: move on rather than stall.
            return out + self._next_generation(run)
        return out

    def _sweep_jobs(self, run: RunState) -> list[tuple[SweepJob, KernelSource]]:
        """This generation's new sweep points, for kernels that are still elites.

        Points whose kernel was superseded, or whose setting was already evaluated (the elite's own
        setting, say), are answered at once without spending an evaluation.
        """
        elites = {e.candidate_id: e.speedup for e in self._elites(run)}
        wanted = self._sweep_batch(run)
        jobs: list[tuple[SweepJob, KernelSource]] = []
        while len(jobs) < wanted:
            # the fastest kernels' sweeps first: their settings are the ones that can become the best
            batch = run.sweeps.next_batch(wanted - len(jobs), priority=lambda cid: elites.get(cid, 0.0))
            if not batch:
                break
            for job in batch:
                parent = run.candidates.get(job.candidate_id)
                if parent is None or job.candidate_id not in elites:
                    run.sweeps.report(job, SweepFailure("superseded", "the swept kernel is no longer elite"))
                    continue
                if elites[job.candidate_id] < SWEEP_NEAR_BEST * run.best_speedup:
                    run.sweeps.report(
                        job, SweepFailure("superseded", "the swept kernel fell behind the best")
                    )
                    continue
                source = replace(parent.source, params=dict(job.params))
                known = run.source_hashes.get(source_digest(source))
                if known is not None:
                    self._report_known_point(run, job, known)
                    continue
                jobs.append((job, source))
        return jobs

    def _report_known_point(self, run: RunState, job: SweepJob, candidate_id: str) -> None:
        state = run.candidates.get(candidate_id)
        evaluation = state.evaluation if state is not None else None
        if evaluation is not None and evaluation.correct and evaluation.runtime_ms > 0:
            run.sweeps.report(job, evaluation.runtime_ms / 1000.0)
        else:
            run.sweeps.report(job, SweepFailure("duplicate", "this setting was already tried"))

    def _sweep_batch(self, run: RunState) -> int:
        """Sweep points per generation: as many as generation requests, so both searches advance."""
        return max(1, run.config.population)

    def _generation_request(
        self, run: RunState, plan: GenerationPlan, request_id: str, count: int = 1
    ) -> Outgoing:
        request = search_pb2.GenerateCandidates(
            request_id=request_id,
            run_id=run.run_id,
            task=run.task_proto,
            backend=self._backend(run),
            mutation=plan.operator if (plan.parent or plan.repair) else "",
            hints=list(plan.hints),
            guidance=dict(plan.guidance),
            proposal_weights=dict(plan.proposal_weights),
            count=count,
            seed=run.rng.randrange(2**31),
            repair=plan.repair is not None,
            iteration=run.generation,
            prompt_variant_id=plan.prompt_variant_id or "",
            generator=run.config.generator,
            island=plan.island,
        )
        source_id = (
            plan.repair.candidate_id if plan.repair else (plan.parent.candidate_id if plan.parent else None)
        )
        if source_id and source_id in run.candidates:
            parent = run.candidates[source_id]
            evaluation = parent.evaluation
            request.parent.CopyFrom(
                search_pb2.ParentKernel(
                    candidate_id=source_id,
                    source=kernel_to_proto(parent.source),
                    descriptors=descriptors_to_proto(parent.info.descriptors),
                    speedup=evaluation.speedup if evaluation else 0.0,
                    runtime_ms=evaluation.runtime_ms if evaluation else 0.0,
                    feedback=plan.repair.feedback if plan.repair else "",
                )
            )
        run.pending_requests.add(request_id)
        return Outgoing(subjects.generate(run.config.generator), request, request_id)

    def _backend(self, run: RunState) -> str:
        return run.config.hardware.split(".", 1)[0]

    def _sweep_candidate(
        self, run: RunState, job: SweepJob, source: KernelSource, request_id: str
    ) -> list[Outgoing]:
        parent = run.candidates[job.candidate_id]
        candidate_id = f"{request_id}-c0"
        out = self._accept_candidate(
            run,
            candidate_id=candidate_id,
            source=source,
            reported=parent.info.reported,
            parent_id=job.candidate_id,
            operator="retune",
            request_id=request_id,
            rationale=f"tunable sweep point {dict(job.params)}",
            island=parent.info.island,
        )
        run.sweep_jobs[candidate_id] = job
        return out

    # -- events -----------------------------------------------------------------------------------------
    def on_generated(self, event: search_pb2.CandidatesGenerated) -> list[Outgoing]:
        run = self.runs.get(event.run_id)
        if run is None or event.request_id in run.handled_requests:
            return []
        run.handled_requests.add(event.request_id)
        run.pending_requests.discard(event.request_id)
        out: list[Outgoing] = []
        if run.active:
            if event.error_reason:
                run.generation_errors.setdefault(event.error_reason, event.error_message)
                log.warning(
                    "generation failed",
                    run_id=run.run_id,
                    reason=event.error_reason,
                    message=event.error_message,
                )
            repair_of = event.parent_id if event.repair else None
            parent_id = event.parent_id or None
            if repair_of is not None:
                failed = run.candidates.get(repair_of)
                parent_id = failed.info.parent_id if failed else None
            operator = event.mutation or "seed"
            for index, generated in enumerate(event.candidates):
                try:
                    source = kernel_from_proto(generated.source)
                except ValueError as exc:
                    log.warning("generator returned an unusable kernel", error=str(exc))
                    continue
                reported = Descriptors(
                    generated.strategy.memory, generated.strategy.algorithm, generated.strategy.parallelism
                )
                out += self._accept_candidate(
                    run,
                    candidate_id=f"{event.request_id}-c{index}",
                    source=source,
                    reported=reported,
                    parent_id=parent_id,
                    operator=operator,
                    request_id=event.request_id,
                    rationale=generated.rationale,
                    generator=event.generator,
                    island=event.island,
                    prompt_variant_id=event.prompt_variant_id or None,
                    repair_of=repair_of,
                    generation=event.iteration,
                )
        out += self._maybe_advance(run)
        self._notify(run)
        return out

    def _accept_candidate(
        self,
        run: RunState,
        *,
        candidate_id: str,
        source: KernelSource,
        reported: Descriptors | None,
        parent_id: str | None,
        operator: str,
        request_id: str,
        rationale: str,
        generator: str = "",
        island: int = 0,
        prompt_variant_id: str | None = None,
        repair_of: str | None = None,
        generation: int | None = None,
    ) -> list[Outgoing]:
        if candidate_id in run.candidates:
            return []
        digest = source_digest(source)
        if digest in run.source_hashes:
            return []  # the same kernel with the same parameters is never evaluated twice in a run
        run.source_hashes[digest] = candidate_id
        classification = classify(source, run.reference_ops, reported)
        info = CandidateInfo(
            candidate_id=candidate_id,
            parent_id=parent_id,
            descriptors=classification.descriptors,
            generation=run.generation if generation is None else generation,
            island=island,
            operator=operator,
            prompt_variant_id=prompt_variant_id,
            reported=reported,
            repair_of=repair_of,
            params=dict(source.params),
            shape=ALL_SHAPES,
        )
        run.candidates[candidate_id] = CandidateState(info=info, source=source, created_at=self.clock())
        run.generated += 1
        created = search_pb2.CandidateCreated(
            candidate_id=candidate_id,
            run_id=run.run_id,
            parent_ids=[parent_id] if parent_id else [],
            iteration=info.generation,
            generator=generator or run.config.generator,
            source=kernel_to_proto(source),
            analysed=descriptors_to_proto(classification.descriptors),
            mutation=operator,
            prompt_variant_id=info.prompt_variant_id or "",
            island=info.island,
            request_id=request_id,
            rationale=rationale,
            hardware=run.config.hardware,
            repair_of=repair_of or "",
        )
        if reported is not None:
            created.self_reported.CopyFrom(descriptors_to_proto(reported))
        compile_request = build_pb2.CompileCandidate(
            candidate_id=candidate_id,
            run_id=run.run_id,
            source=kernel_to_proto(source),
            build_target=run.build_target,
            execute_hardware=run.config.hardware,
            task=run.task_proto,
        )
        return [
            Outgoing(subjects.CANDIDATE_CREATED, created, f"created-{candidate_id}"),
            Outgoing(subjects.compile_(run.build_target), compile_request, f"compile-{candidate_id}"),
        ]

    def on_compiled(self, event: build_pb2.CandidateCompiled) -> list[Outgoing]:
        run = self.runs.get(event.run_id)
        if run is not None and event.candidate_id == run.retime_id:
            if event.ok or not run.active:
                return []
            log.warning("the best kernel's re-time did not build", run_id=run.run_id, reason=event.reason)
            return self._retimed(run)
        candidate = run.candidates.get(event.candidate_id) if run else None
        if run is None or candidate is None or candidate.compiled or candidate.resolved:
            return []
        candidate.compiled = True
        candidate.build_flags = tuple(event.flags)
        if event.ok:
            run.compiled += 1
            self._notify(run)
            return []
        failure = EvaluationInfo(
            candidate_id=event.candidate_id,
            correct=False,
            failure_reason=event.reason or "compile_error",
            message=event.log[-4000:],
        )
        return self._resolve(run, candidate, failure, None)

    def on_evaluated(self, event: evaluation_pb2.EvaluationFinished) -> list[Outgoing]:
        run = self.runs.get(event.run_id)
        if run is not None and event.candidate_id == run.retime_id:
            if not run.active or run.retime_done:
                return []
            run.measurements.append(measurement_of(event))
            if not event.correct:
                log.warning("the best kernel's re-time failed", run_id=run.run_id, reason=event.reason)
            return self._retimed(run)
        candidate = run.candidates.get(event.candidate_id) if run else None
        if run is None or candidate is None or candidate.resolved:
            return []
        if not candidate.compiled:
            candidate.compiled = True
            run.compiled += 1
        evaluation = EvaluationInfo(
            candidate_id=event.candidate_id,
            correct=event.correct,
            speedup=event.speedup if event.correct and event.speedup > 0 else None,
            runtime_s=event.runtime_ms / 1000.0 if event.runtime_ms else None,
            failure_reason=event.reason or None,
            message=event.message,
            mismatch=Mismatch(abs_error=event.max_abs_error)
            if not event.correct and event.max_abs_error
            else None,
        )
        return self._resolve(run, candidate, evaluation, event)

    @staticmethod
    def restore_result(
        run: RunState,
        candidate: CandidateState,
        evaluation: EvaluationInfo,
        event: evaluation_pb2.EvaluationFinished | None,
    ) -> Outcome:
        """Apply a candidate's result to the run's state: engine, counters, best. Emits nothing."""
        candidate.resolved = True
        candidate.evaluation = event
        if event is not None:
            run.measurements.append(measurement_of(event))
        if not evaluation.failed and event is not None:
            # the archive ranks kernels by their own time over the run's pooled eager baseline
            eager = pool_baseline(m.baseline_ms for m in run.measurements)
            pooled = kernel_speedup(event.runtime_ms or None, eager)
            evaluation = replace(evaluation, speedup=pooled if pooled is not None else evaluation.speedup)
        outcome: Outcome = run.engine.record_evaluation(candidate.info, evaluation)
        if evaluation.failed:
            run.failed += 1
        else:
            run.correct += 1
            if event is not None:
                RunCoordinator._offer_shapes(run, candidate, event)
        RunCoordinator._rank_best(run)
        return outcome

    @staticmethod
    def _rank_best(run: RunState) -> None:
        """The run's best kernel and figure by the one definition (kernelfoundry.domain.speedup)."""
        best = fastest(run.measurements)
        figure = run_speedup(run.measurements)
        run.best_id = best.candidate_id if best is not None else ""
        run.best_speedup = figure.speedup if figure is not None else 0.0

    @staticmethod
    def _offer_shapes(
        run: RunState, candidate: CandidateState, event: evaluation_pb2.EvaluationFinished
    ) -> None:
        """Keep, per input shape, the fastest (kernel, setting): the best setting differs between shapes."""
        for timing in event.shapes:
            if timing.runtime_ms > 0:
                run.sweeps.book.offer(
                    run.task.name,
                    timing.shape,
                    run.config.hardware,
                    candidate.info.candidate_id,
                    candidate.source.defines(),
                    timing.runtime_ms / 1000.0,
                )

    def tuned(self, run: RunState) -> list[run_pb2.ShapeSetting]:
        return [
            run_pb2.ShapeSetting(
                shape=shape,
                candidate_id=best.candidate_id,
                params={k: str(v) for k, v in best.params.items()},
                runtime_ms=best.runtime_s * 1000.0,
                hardware=device,
            )
            for (task, shape, device), best in run.sweeps.book.entries()
            if task == run.task.name and shape != ALL_SHAPES  # the sweeps' aggregate is not a shape
        ]

    def _resolve(
        self,
        run: RunState,
        candidate: CandidateState,
        evaluation: EvaluationInfo,
        event: evaluation_pb2.EvaluationFinished | None,
    ) -> list[Outgoing]:
        out: list[Outgoing] = []
        if not run.active:
            candidate.resolved = True
            candidate.evaluation = event
            return out
        best_before = run.best_id
        outcome = self.restore_result(run, candidate, evaluation, event)
        self._feed_sweeps(run, candidate, evaluation, outcome)
        if run.best_id and run.best_id != best_before:
            run.best_path = self._write_best(run, run.candidates[run.best_id])
        archive = run_pb2.ArchiveUpdated(
            run_id=run.run_id,
            iteration=run.generation,
            cells=self._cells(run),
            outcome=outcome.label,
            candidate_id=candidate.info.candidate_id,
        )
        out.append(Outgoing(subjects.ARCHIVE_UPDATED, archive, f"archive-{candidate.info.candidate_id}"))
        out += self._maybe_advance(run)
        self._notify(run)
        return out

    def _feed_sweeps(
        self, run: RunState, candidate: CandidateState, evaluation: EvaluationInfo, outcome: Outcome
    ) -> None:
        job = run.sweep_jobs.pop(candidate.info.candidate_id, None)
        if job is not None:
            result: float | SweepFailure = (
                evaluation.runtime_s
                if not evaluation.failed and evaluation.runtime_s
                else SweepFailure(evaluation.reason or "failed", evaluation.message[:200])
            )
            run.sweeps.report(job, result)
            return
        tunables = candidate.source.tunables
        if run.config.sweeps and tunables and outcome.label in SWEEP_TRIGGERS:
            run.sweeps.start(
                candidate.info.candidate_id,
                tunables,
                ALL_SHAPES,
                run.config.hardware,
                start=candidate.source.defines(),
            )

    def _maybe_advance(self, run: RunState) -> list[Outgoing]:
        if not run.active or run.pending_requests or run.unresolved():
            return []
        return self._next_generation(run)

    # -- ending -----------------------------------------------------------------------------------------
    def cancel(self, run_id: str) -> list[Outgoing]:
        run = self.runs[run_id]
        if not run.active:
            return []
        return self._finish(run, run_pb2.RUN_STATUS_CANCELLED, "cancelled by the user")

    def fail(self, run_id: str, message: str) -> list[Outgoing]:
        """End a run that cannot make progress (kernelfoundry.services.evolver.liveness) with its reason."""
        run = self.runs[run_id]
        if not run.active:
            return []
        return self._finish(run, run_pb2.RUN_STATUS_FAILED, message)

    def _conclude(self, run: RunState, message: str) -> list[Outgoing]:
        """The search is over: fail without a correct kernel, else re-time the best, then complete."""
        if not run.best_id:
            return self._finish(run, run_pb2.RUN_STATUS_FAILED, no_kernel_reason(run, message))
        if run.retime_done:
            return self._finish(run, run_pb2.RUN_STATUS_COMPLETED, message)
        if run.retime_id:
            return []  # the re-time is in flight; its result ends the run
        return self._start_retime(run, message)

    def _start_retime(self, run: RunState, message: str) -> list[Outgoing]:
        """Build and evaluate the best kernel once more, eager (and torch.compile) timed beside it."""
        best = run.candidates[run.best_id]
        run.retime_id = retime_id(run.best_id, str(int(self.clock() * 1000)))
        run.finish_message = message
        run.message = f"re-timing the best kernel {run.best_id} beside PyTorch eager"
        # Recorded as a candidate of its own (a child of the best, operator "retime"), so that the lineage
        # holds every evaluation's candidate and the figure can be recomputed from it.
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
        request = build_pb2.CompileCandidate(
            candidate_id=run.retime_id,
            run_id=run.run_id,
            source=kernel_to_proto(best.source),
            build_target=run.build_target,
            execute_hardware=run.config.hardware,
            task=run.task_proto,
        )
        self._notify(run)
        return [
            Outgoing(subjects.CANDIDATE_CREATED, created, f"created-{run.retime_id}"),
            Outgoing(subjects.compile_(run.build_target), request, f"compile-{run.retime_id}"),
        ]

    def _retimed(self, run: RunState) -> list[Outgoing]:
        run.retime_done = True
        self._rank_best(run)
        figure = run_speedup(run.measurements)
        note = "" if figure is not None and figure.retimed else " (the re-time failed: figures from the run)"
        return self._finish(run, run_pb2.RUN_STATUS_COMPLETED, run.finish_message + note)

    def _finish(self, run: RunState, status: int, message: str) -> list[Outgoing]:
        run.status = status
        run.message = message
        run.finished_at = self.clock()
        finished = run_pb2.RunFinished(
            run_id=run.run_id, status=status, progress=self.progress(run), finished_at=run.finished_at
        )
        self._notify(run)
        return [Outgoing(subjects.RUN_FINISHED, finished, f"finished-{run.run_id}")]

    def _write_best(self, run: RunState, candidate: CandidateState) -> str:
        """The best kernel as it was built: every -D value the build passed is a #define at its top, and
        best.manifest.json beside it names the entry point, the glue and the build flags, so that
        `kernelfoundry evaluate TASK best.<ext>` builds the same unit the run measured."""
        folder = self.state_dir / "runs" / run.run_id
        folder.mkdir(parents=True, exist_ok=True)
        ext = EXTENSIONS.get(candidate.source.language, "txt")
        path = folder / f"best.{ext}"
        path.write_text(saved_source(run.run_id, candidate.info.candidate_id, candidate.source))
        glue = folder / "best_glue.py"
        if candidate.source.glue:
            glue.write_text(candidate.source.glue)
        else:
            glue.unlink(missing_ok=True)
        manifest = build_manifest(run, candidate, glue.name if candidate.source.glue else "")
        (folder / "best.manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return str(path.resolve())

    # -- views ------------------------------------------------------------------------------------------
    def _cells(self, run: RunState) -> list[run_pb2.ArchiveCell]:
        cells = []
        for elite in self._elites(run):
            state = run.candidates.get(elite.candidate_id)
            runtime = state.evaluation.runtime_ms if state and state.evaluation else 0.0
            cells.append(
                run_pb2.ArchiveCell(
                    descriptors=descriptors_to_proto(elite.descriptors),
                    candidate_id=elite.candidate_id,
                    speedup=elite.speedup,
                    runtime_ms=runtime,
                )
            )
        return cells

    @staticmethod
    def _elites(run: RunState) -> list[Elite]:
        return run.engine.merged_archive().elites()

    def best_kernel(self, run: RunState) -> run_pb2.BestKernel:
        if not run.best_id:
            return run_pb2.BestKernel()
        state = run.candidates[run.best_id]
        evaluation = state.evaluation
        figure = run_speedup(run.measurements)
        return run_pb2.BestKernel(
            candidate_id=run.best_id,
            source=kernel_to_proto(state.source),
            speedup=run.best_speedup,
            runtime_ms=figure.kernel_ms if figure else (evaluation.runtime_ms if evaluation else 0.0),
            baseline_ms=figure.eager.median_ms if figure else (evaluation.baseline_ms if evaluation else 0.0),
            compile_baseline_ms=figure.compile_ms
            if figure
            else (evaluation.compile_baseline_ms if evaluation else 0.0),
            descriptors=descriptors_to_proto(state.info.descriptors),
            iteration=state.info.generation,
            hardware=run.config.hardware,
            path=run.best_path,
        )

    def progress(self, run: RunState) -> run_pb2.RunProgress:
        counts = run.engine.outcomes.to_dict()
        outcomes = run_pb2.OutcomeCounts(
            improvement=counts.get("improvement", 0),
            neutral=counts.get("neutral", 0),
            regression=counts.get("regression", 0),
            new_cell=counts.get("new_cell", 0),
            elite_replaced=counts.get("elite_replaced", 0),
            failed={k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("failed:")},
        )
        end = run.finished_at or self.clock()
        figure = run_speedup(run.measurements)
        return run_pb2.RunProgress(
            run_id=run.run_id,
            task_name=run.task.name,
            status=run.status,  # type: ignore[arg-type]
            iteration=run.generation,
            iterations=run.config.iterations,
            candidates_generated=run.generated,
            candidates_compiled=run.compiled,
            candidates_correct=run.correct,
            candidates_failed=run.failed,
            best_speedup=run.best_speedup,
            outcomes=outcomes,
            archive=self._cells(run),
            message=run.message,
            best=self.best_kernel(run),
            elapsed_s=end - run.started_at,
            config=run.config,
            tuned=self.tuned(run),
            speedup=speedup_to_proto(figure) if figure is not None else None,
        )

    def _notify(self, run: RunState) -> None:
        snapshot = self.progress(run)
        for queue in list(run.listeners):
            queue.put_nowait(snapshot)


def measurement_of(event: evaluation_pb2.EvaluationFinished) -> Measurement:
    """An evaluation event's timings, as the speedup definition reads them."""
    return Measurement(
        candidate_id=event.candidate_id,
        correct=event.correct,
        runtime_ms=event.runtime_ms or None,
        runtime_spread_ms=event.runtime_spread_ms or None,
        baseline_ms=event.baseline_ms or None,
        compile_baseline_ms=event.compile_baseline_ms or None,
    )


def speedup_to_proto(figure: RunSpeedup) -> run_pb2.RunSpeedup:
    return run_pb2.RunSpeedup(
        candidate_id=figure.candidate_id,
        speedup=figure.speedup,
        kernel_ms=figure.kernel_ms,
        kernel_spread_ms=figure.kernel_spread_ms,
        eager_ms=figure.eager.median_ms,
        eager_spread_ms=figure.eager.spread_ms,
        eager_samples=figure.eager.samples,
        eager_outliers_ms=list(figure.eager.outliers_ms),
        retimed=figure.retimed,
        side_by_side_eager_ms=figure.side_by_side_eager_ms,
        side_by_side_speedup=figure.side_by_side_speedup,
        compile_ms=figure.compile_ms,
        speedup_vs_compile=figure.speedup_vs_compile,
    )


def saved_source(run_id: str, candidate_id: str, source: KernelSource) -> str:
    """The kernel's code with every define its build passed (declared defaults and chosen values) on top.

    Tunables are guarded with `#ifndef NAME`, so these defines win exactly as `-DNAME=value` did.
    """
    defines = "".join(f"#define {k} {v}\n" for k, v in sorted(source.defines().items()))
    header = (
        f"// KernelFoundry run {run_id}, candidate {candidate_id}: the unit this run built and measured.\n"
        "// The defines below are the values its build passed as -DNAME=value.\n"
    )
    return header + defines + source.code


def build_manifest(run: RunState, candidate: CandidateState, glue_file: str) -> dict[str, object]:
    """What `kernelfoundry evaluate` needs beside the source to build and run the same unit."""
    return {
        "run_id": run.run_id,
        "candidate_id": candidate.info.candidate_id,
        "task": run.task.name,
        "language": candidate.source.language,
        "backend": run.config.hardware.split(".", 1)[0],
        "hardware": run.config.hardware,
        "build_target": run.build_target,
        "entry_point": candidate.source.entry_point,
        "glue_file": glue_file,
        "defines": {k: str(v) for k, v in sorted(candidate.source.defines().items())},
        "build_flags": list(candidate.build_flags),
    }


def no_kernel_reason(run: RunState, budget_message: str) -> str:
    """Why a run ends without a correct kernel, in words a user can act on."""
    if run.generated == 0:
        errors = "; ".join(f"{reason}: {message}" for reason, message in run.generation_errors.items())
        detail = errors or "the generator returned no kernel"
        return f"no candidate was generated ({detail}); {budget_message}"
    failures = {
        k.split(":", 1)[1]: v for k, v in run.engine.outcomes.to_dict().items() if k.startswith("failed:")
    }
    counts = ", ".join(f"{reason} x{n}" for reason, n in sorted(failures.items(), key=lambda kv: -kv[1]))
    example = next(
        (
            c.evaluation.message
            for c in run.candidates.values()
            if c.evaluation is not None and not c.evaluation.correct and c.evaluation.message
        ),
        "",
    )
    text = f"no correct kernel among {run.generated} candidates ({counts or 'none evaluated'})"
    if example:
        text += f"; first failure: {example[:300]}"
    return f"{text}; {budget_message}"
