"""Views of a run for the API and the bus: its progress, archive cells, best kernel, tuned settings and
the tokens and cost of its generation requests.

Read-only over the run's state (kernelfoundry.services.evolver.state); every figure comes from the one
speedup definition (kernelfoundry.domain.speedup). `notify` hands a fresh snapshot to the run's
listeners (StreamRunProgress).
"""

from __future__ import annotations

from kernelfoundry.codec import descriptors_to_proto, kernel_to_proto, run_config_to_proto
from kernelfoundry.domain.archive import Elite
from kernelfoundry.domain.speedup import RunSpeedup, run_speedup
from kernelfoundry.domain.sweeps import ALL_SHAPES
from kernelfoundry.generators.accounting import UsageTotals
from kernelfoundry.services.evolver.state import RunState
from kernelfoundry.v1 import run_pb2


def elites(run: RunState) -> list[Elite]:
    return run.engine.merged_archive().elites()


def cells(run: RunState) -> list[run_pb2.ArchiveCell]:
    out = []
    for elite in elites(run):
        state = run.candidates.get(elite.candidate_id)
        runtime = state.evaluation.runtime_ms if state and state.evaluation else 0.0
        out.append(
            run_pb2.ArchiveCell(
                descriptors=descriptors_to_proto(elite.descriptors),
                candidate_id=elite.candidate_id,
                speedup=elite.speedup,
                runtime_ms=runtime,
            )
        )
    return out


def best_kernel(run: RunState) -> run_pb2.BestKernel:
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


def tuned(run: RunState) -> list[run_pb2.ShapeSetting]:
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


def failure_counts(run: RunState) -> dict[str, int]:
    """Failed evaluations by reason."""
    return {
        k.split(":", 1)[1]: v for k, v in run.engine.outcomes.to_dict().items() if k.startswith("failed:")
    }


def progress(run: RunState, now: float) -> run_pb2.RunProgress:
    counts = run.engine.outcomes.to_dict()
    outcomes = run_pb2.OutcomeCounts(
        improvement=counts.get("improvement", 0),
        neutral=counts.get("neutral", 0),
        regression=counts.get("regression", 0),
        new_cell=counts.get("new_cell", 0),
        elite_replaced=counts.get("elite_replaced", 0),
        failed=failure_counts(run),
    )
    end = run.finished_at or now
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
        archive=cells(run),
        message=run.message,
        best=best_kernel(run),
        elapsed_s=end - run.started_at,
        config=run_config_to_proto(run.config),
        tuned=tuned(run),
        speedup=speedup_to_proto(figure) if figure is not None else None,
        usage=totals_to_proto(run.usage.total()),
        usage_by_generator={
            name: totals_to_proto(part) for name, part in sorted(run.usage.by_generator.items())
        },
    )


def totals_to_proto(totals: UsageTotals) -> run_pb2.GenerationTotals:
    return run_pb2.GenerationTotals(
        requests=totals.requests,
        prompt_tokens=totals.prompt_tokens,
        completion_tokens=totals.completion_tokens,
        cost_usd=totals.cost_usd,
    )


def notify(run: RunState, now: float) -> None:
    """Hand the run's listeners a fresh snapshot."""
    snapshot = progress(run, now)
    for queue in list(run.listeners):
        queue.put_nowait(snapshot)


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


def no_kernel_reason(run: RunState, budget_message: str) -> str:
    """Why a run ends without a correct kernel, in words a user can act on."""
    if run.generated == 0:
        errors = "; ".join(f"{reason}: {message}" for reason, message in run.generation_errors.items())
        detail = errors or "the generator returned no kernel"
        return f"no candidate was generated ({detail}); {budget_message}"
    failures = failure_counts(run)
    counts = ", ".join(f"{reason} x{n}" for reason, n in sorted(failures.items(), key=lambda kv: -kv[1]))
    examples: dict[str, str] = {}  # the first message of each failure reason, in candidate order
    for c in run.candidates.values():
        if c.evaluation is not None and not c.evaluation.correct and c.evaluation.message:
            examples.setdefault(c.evaluation.reason or "failed", c.evaluation.message)
    text = f"no correct kernel among {run.generated} candidates ({counts or 'none evaluated'})"
    if len(examples) == 1:
        text += f"; first failure: {next(iter(examples.values()))[:300]}"
    elif examples:
        order = sorted(examples, key=lambda r: -failures.get(r, 0))  # the most frequent first
        text += "; first failure of each kind: " + "; ".join(f"{r}: {examples[r][:300]}" for r in order)
    return f"{text}; {budget_message}"
