"""The evolver's run coordinator: turns events into engine calls and engine plans into messages.

Service layer: no NATS or gRPC here (handlers return the messages to publish), no search or sweep policy
either (the pure EvolutionEngine and kernelfoundry.domain.sweeps decide). Idempotent by construction:
candidate ids are derived from request ids, and every event for a candidate already resolved is ignored.

Its neighbours, one responsibility each: the run's state (.state), the messages it sends (.messages),
the progress views (.progress), the best kernel's files (.files), resuming from the lineage (.resume).
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from kernelfoundry.bus.protocol import Outgoing
from kernelfoundry.codec import (
    descriptors_from_proto,
    evaluation_from_proto,
    kernel_from_proto,
    run_config_from_proto,
    usage_from_proto,
)
from kernelfoundry.domain.budgets import BARREN_GENERATIONS, Budget
from kernelfoundry.domain.descriptors import Descriptors, classify
from kernelfoundry.domain.engine import EngineConfig, EngineEvent, EvolutionEngine, GenerationPlan
from kernelfoundry.domain.evaluation import CandidateInfo, EvaluationInfo
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.domain.outcomes import Outcome
from kernelfoundry.domain.results import EvaluationResult, build_failure
from kernelfoundry.domain.speedup import fastest, kernel_speedup, pool_baseline, retime_id, run_speedup
from kernelfoundry.domain.sweeps import (
    ALL_SHAPES,
    SweepCampaign,
    SweepFailure,
    SweepJob,
    known_point_result,
    point_result,
    stale_sweep,
    sweep_points_per_generation,
    sweeps_first,
    worth_sweeping,
)
from kernelfoundry.generators.accounting import meta_usage_id
from kernelfoundry.services.evolver import messages
from kernelfoundry.services.evolver import progress as views
from kernelfoundry.services.evolver.files import write_best
from kernelfoundry.services.evolver.state import CandidateState, RunState, source_digest
from kernelfoundry.tasks.model import Task, TaskError
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2

log = get_logger(__name__)


DEFAULT_BUILD_TARGETS = {"cuda.h200": "cuda.sm90", "cuda.h100": "cuda.sm90", "cuda.a100": "cuda.sm80"}
# Finished runs whose final progress stays in memory for the API (the oldest ending leaves first); an
# older one is answered from the store (kernelfoundry.services.evolver.stored). A finished run's working state
# (engine, candidates, measurements) is dropped the moment it ends.
DEFAULT_RETAIN_FINISHED = 256


def stop_message(reason: str | None) -> str:
    """What a run that stopped for `reason` (kernelfoundry.domain.budgets) tells its user."""
    if reason == "nothing_new":
        return (
            f"stopped: {BARREN_GENERATIONS} generations in a row brought no new kernel (the generator"
            " proposed only kernels already evaluated, or nothing)"
        )
    return f"budget reached: {reason}"


class RunCoordinator:
    """All runs of this evolver process.

    `runs` holds the runs in progress, with their whole working state. When a run ends, that state is
    dropped and only its final progress is kept in `finished`, for at most `retain_finished` runs (the
    oldest leaves first): what GetRun, GetBestKernel and CancelRun need of an ended run, never the engine
    or the candidates. `on_finished` sees every ending (metrics), whoever caused it; `on_evaluation`
    every evaluation result taken, once (a redelivered or late result for a resolved candidate is not).
    """

    def __init__(
        self,
        state_dir: Path,
        clock: Callable[[], float] = time.time,
        build_targets: dict[str, str] | None = None,
        *,
        retain_finished: int = DEFAULT_RETAIN_FINISHED,
        on_finished: Callable[[run_pb2.RunFinished], None] | None = None,
        on_evaluation: Callable[[evaluation_pb2.EvaluationFinished], None] | None = None,
        screening: bool = False,
    ) -> None:
        """`screening`: candidates whose cell has an elite are screened first (RunState.time_to_beat)."""
        self.state_dir = state_dir
        self.screening = screening
        self.clock = clock
        self.build_targets = dict(build_targets or {})
        self.runs: dict[str, RunState] = {}
        self.finished: OrderedDict[str, run_pb2.RunProgress] = OrderedDict()
        self.retain_finished = max(0, retain_finished)
        self.on_finished = on_finished
        self.on_evaluation = on_evaluation

    def active_count(self) -> int:
        """Runs in progress (the kf_runs_active gauge reads this: no increment can be missed)."""
        return sum(1 for run in self.runs.values() if run.active)

    def final_progress(self, run_id: str) -> run_pb2.RunProgress | None:
        """The progress a run ended with, while it is among the `retain_finished` newest endings."""
        return self.finished.get(run_id)

    def record_ending(self, finished: run_pb2.RunFinished) -> None:
        """Tell `on_finished` about an ending (also one decided outside a run's state: a run failed at
        start-up because it cannot be resumed)."""
        if self.on_finished is not None:
            self.on_finished(finished)

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
        config: run_pb2.RunConfig,
        build_target: str,
        reference_ops: int,
        started_at: float | None = None,
    ) -> RunState:
        """Register a run's state (new or restored); emits nothing."""
        started = self.clock() if started_at is None else started_at
        settings = run_config_from_proto(config)
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
            config=settings,
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
        config: run_pb2.RunConfig,
        build_target: str,
        reference_ops: int,
    ) -> list[Outgoing]:
        run = self.create_run(run_id, task, config, build_target, reference_ops)
        out = [messages.run_submitted(run)]
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
        if run.generation_new is not None:
            run.engine.budget.generation_ended(run.generation_new)
        decision = run.engine.stop(now)
        if decision:
            return self._conclude(run, stop_message(decision.reason))
        plans, jobs = self._plan_and_sweep(run, now)
        if not plans and not jobs:
            if run.unresolved():
                return []  # the evaluations in flight take the rest of the budget: wait for them
            return self._conclude(run, "nothing left to try")
        run.generation = run.engine.generation
        run.generation_new = 0
        out: list[Outgoing] = []
        for index, (plan, count) in enumerate(messages.merge_seed_plans(plans)):
            request_id = f"{run.run_id}-g{run.generation}-r{index}"
            out.append(messages.generation_request(run, plan, request_id, count, run.rng.randrange(2**31)))
            run.pending_requests.add(request_id)
        for index, (job, source) in enumerate(jobs):
            out += self._sweep_candidate(run, job, source, f"{run.run_id}-g{run.generation}-s{index}")
        if not run.pending_requests and run.unresolved() == 0:
            # Every sweep point was a duplicate: move on rather than stall.
            return out + self._next_generation(run)
        return out

    def _plan_and_sweep(
        self, run: RunState, now: float
    ) -> tuple[list[GenerationPlan], list[tuple[SweepJob, KernelSource]]]:
        """The generation's requests and sweep points within the evaluation budget. The requests come
        first, unless the generator's last generation brought nothing new: then the sweeps' points do
        (a small budget would otherwise go to asking again, and the declared tunables go unswept)."""
        in_flight = run.unresolved()
        if not run.config.sweeps:
            return run.engine.plan_generation(now, run.rng, in_flight=in_flight), []
        if sweeps_first(run.engine.budget.barren_generations):
            jobs = self._sweep_jobs(run, run.engine.budget.evaluations_left(in_flight))
            plans = run.engine.plan_generation(
                now, run.rng, in_flight=in_flight + len(jobs), beside=len(jobs)
            )
            return plans, jobs
        plans = run.engine.plan_generation(now, run.rng, in_flight=in_flight)
        return plans, self._sweep_jobs(run, run.engine.budget.evaluations_left(in_flight + len(plans)))

    def _sweep_jobs(self, run: RunState, left: int | None) -> list[tuple[SweepJob, KernelSource]]:
        """This generation's new sweep points, for kernels that are still elites, at most `left` of
        them (the evaluations the budget has left; None: no evaluation budget).

        Points whose kernel was superseded, or whose setting was already evaluated (the elite's own
        setting, say), are answered at once without spending an evaluation.
        """
        elites = {e.candidate_id: e.speedup for e in views.elites(run)}
        wanted = sweep_points_per_generation(run.config.population)
        if left is not None:
            wanted = min(wanted, left)
        jobs: list[tuple[SweepJob, KernelSource]] = []
        while len(jobs) < wanted:
            # the fastest kernels' sweeps first: their settings are the ones that can become the best
            batch = run.sweeps.next_batch(wanted - len(jobs), priority=lambda cid: elites.get(cid, 0.0))
            if not batch:
                break
            for job in batch:
                parent = run.candidates.get(job.candidate_id)
                stale = stale_sweep(job.candidate_id, elites if parent else {}, run.best_speedup)
                if parent is None or stale is not None:
                    run.sweeps.report(job, stale or SweepFailure("superseded", "no such kernel"))
                    continue
                source = replace(parent.source, params=dict(job.params))
                known = run.source_hashes.get(source_digest(source))
                if known is not None:
                    state = run.candidates.get(known)
                    tried = state.evaluation if state is not None else None
                    runtime_ms = tried.runtime_ms if tried is not None else 0.0
                    run.sweeps.report(
                        job, known_point_result(tried is not None and tried.correct, runtime_ms)
                    )
                    continue
                jobs.append((job, source))
        return jobs

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
        if run is None:
            return []
        run.usage.record(event.request_id, event.generator, usage_from_proto(event.usage))
        if event.meta_generator:
            run.usage.record(
                meta_usage_id(event.request_id), event.meta_generator, usage_from_proto(event.meta_usage)
            )
        if event.request_id in run.handled_requests:
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
                reported = descriptors_from_proto(generated.strategy)
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
        run.candidates[candidate_id] = CandidateState(
            info=info, source=source, created_at=self.clock(), generator=generator
        )
        run.generated += 1
        if run.generation_new is not None:
            run.generation_new += 1
        return [
            messages.candidate_created(
                run, info, source, request_id=request_id, rationale=rationale, generator=generator
            ),
            messages.compile_request(run, candidate_id, source, screen=self.screening),
        ]

    def redispatch(self, run: RunState) -> list[Outgoing]:
        """Build (and so evaluate) again every candidate of a restored run that has no result: for a run
        brought from another deployment, whose in-flight messages were on another bus. Ids are the
        candidates' own, so a result that still arrives is taken once."""
        return [
            messages.compile_request(run, candidate_id, state.source, screen=self.screening)
            for candidate_id, state in run.candidates.items()
            if not state.resolved
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
        failure = build_failure(event.candidate_id, event.reason, event.log)
        return self._resolve(run, candidate, failure, None)

    def on_evaluated(self, event: evaluation_pb2.EvaluationFinished) -> list[Outgoing]:
        run = self.runs.get(event.run_id)
        if run is not None and event.candidate_id == run.retime_id:
            if not run.active or run.retime_done:
                return []
            self._taken(event)
            run.measurements.append(evaluation_from_proto(event).measurement())
            if not event.correct:
                log.warning("the best kernel's re-time failed", run_id=run.run_id, reason=event.reason)
            return self._retimed(run)
        candidate = run.candidates.get(event.candidate_id) if run else None
        if run is None or candidate is None or candidate.resolved:
            return []
        self._taken(event)
        if not candidate.compiled:
            candidate.compiled = True
            run.compiled += 1
        result = evaluation_from_proto(event)
        return self._resolve(run, candidate, result.info(), result)

    def _taken(self, event: evaluation_pb2.EvaluationFinished) -> None:
        if self.on_evaluation is not None:
            self.on_evaluation(event)

    @staticmethod
    def settle(
        run: RunState,
        candidate: CandidateState,
        evaluation: EvaluationInfo,
        result: EvaluationResult | None,
    ) -> EvaluationInfo:
        """Apply a candidate's result to the run's state (measurements, counters, tuned shapes, best),
        not to the engine: returns what the engine records, its speedup the kernel's time over the run's
        pooled eager baseline. `result` is None for a candidate whose build failed (no evaluation ran).
        Emits nothing; live results and resume's replay of the lineage both come through here."""
        candidate.resolved = True
        candidate.evaluation = result
        if result is not None:
            run.measurements.append(result.measurement())
        if not evaluation.failed and result is not None:
            # the archive ranks kernels by their own time over the run's pooled eager baseline
            eager = pool_baseline(m.baseline_ms for m in run.measurements)
            pooled = kernel_speedup(result.runtime_ms or None, eager)
            evaluation = replace(evaluation, speedup=pooled if pooled is not None else evaluation.speedup)
        if evaluation.failed:
            run.failed += 1
        else:
            run.correct += 1
            if result is not None:
                RunCoordinator._offer_shapes(run, candidate, result)
        RunCoordinator._rank_best(run)
        return evaluation

    @staticmethod
    def replay_engine(run: RunState, events: Iterable[EngineEvent]) -> None:
        """Rebuild the run's engine from recorded events (resume): the engine's own replay, with the
        run's engine configuration, budget and clock start."""
        engine = run.engine
        run.engine = EvolutionEngine.replay(events, engine.config, engine.budget_spec, run.started_at)

    @staticmethod
    def _rank_best(run: RunState) -> None:
        """The run's best kernel and figure by the one definition (kernelfoundry.domain.speedup)."""
        best = fastest(run.measurements)
        figure = run_speedup(run.measurements)
        run.best_id = best.candidate_id if best is not None else ""
        run.best_speedup = figure.speedup if figure is not None else 0.0

    @staticmethod
    def _offer_shapes(run: RunState, candidate: CandidateState, result: EvaluationResult) -> None:
        """Keep, per input shape, the fastest (kernel, setting): the best setting differs between shapes."""
        for timing in result.shapes:
            if timing.runtime_ms > 0:
                run.sweeps.book.offer(
                    run.task.name,
                    timing.shape,
                    run.config.hardware,
                    candidate.info.candidate_id,
                    candidate.source.defines(),
                    timing.runtime_ms / 1000.0,
                )

    def _resolve(
        self,
        run: RunState,
        candidate: CandidateState,
        evaluation: EvaluationInfo,
        result: EvaluationResult | None,
    ) -> list[Outgoing]:
        out: list[Outgoing] = []
        if not run.active:
            candidate.resolved = True
            candidate.evaluation = result
            return out
        best_before = run.best_id
        engine_view = self.settle(run, candidate, evaluation, result)
        outcome = run.engine.record_evaluation(candidate.info, engine_view)
        self._feed_sweeps(run, candidate, evaluation, outcome)
        if run.best_id and run.best_id != best_before:
            run.best_path = write_best(self.state_dir, run, run.candidates[run.best_id])
        out.append(
            messages.archive_updated(run, candidate.info.candidate_id, outcome.label, views.cells(run))
        )
        out += self._maybe_advance(run)
        self._notify(run)
        return out

    def _feed_sweeps(
        self, run: RunState, candidate: CandidateState, evaluation: EvaluationInfo, outcome: Outcome
    ) -> None:
        job = run.sweep_jobs.pop(candidate.info.candidate_id, None)
        if job is not None:
            result = point_result(
                evaluation.failed, evaluation.runtime_s, evaluation.reason, evaluation.message
            )
            run.sweeps.report(job, result)
            return
        tunables = candidate.source.tunables
        if worth_sweeping(outcome.label, tunables, run.config.sweeps):
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
        run = self.runs.get(run_id)
        if run is None or not run.active:
            return []
        return self._finish(run, run_pb2.RUN_STATUS_CANCELLED, "cancelled by the user")

    def fail(self, run_id: str, message: str) -> list[Outgoing]:
        """End a run that cannot make progress (kernelfoundry.services.evolver.liveness) with its reason."""
        run = self.runs.get(run_id)
        if run is None or not run.active:
            return []
        return self._finish(run, run_pb2.RUN_STATUS_FAILED, message)

    def _conclude(self, run: RunState, message: str) -> list[Outgoing]:
        """The search is over: fail without a correct kernel, else re-time the best, then complete."""
        if not run.best_id:
            return self._finish(run, run_pb2.RUN_STATUS_FAILED, views.no_kernel_reason(run, message))
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
        self._notify(run)
        return messages.retime_messages(run, best)

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
        ending = messages.run_finished(run, self.progress(run))
        self._notify(run)
        finished: run_pb2.RunFinished = ending.message  # type: ignore[assignment]
        self._retire(run, finished.progress)
        self.record_ending(finished)
        return [ending]

    def _retire(self, run: RunState, final: run_pb2.RunProgress) -> None:
        """Drop an ended run's working state; keep its final progress among the newest endings."""
        self.runs.pop(run.run_id, None)
        if self.retain_finished == 0:
            return
        self.finished[run.run_id] = final
        self.finished.move_to_end(run.run_id)
        while len(self.finished) > self.retain_finished:
            self.finished.popitem(last=False)

    # -- views ------------------------------------------------------------------------------------------
    def best_kernel(self, run: RunState) -> run_pb2.BestKernel:
        return views.best_kernel(run)

    def progress(self, run: RunState) -> run_pb2.RunProgress:
        return views.progress(run, self.clock())

    def _notify(self, run: RunState) -> None:
        views.notify(run, self.clock())
