"""Conversions between the wire messages (kernelfoundry.v1 protobuf) and the domain's dataclasses.

The domain never sees protobuf; adapters call these at the boundary. Shape overrides travel as Python
literals (`repr`) and come back through `ast.literal_eval`, never `eval`.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.kernel import KernelSource, Tunable
from kernelfoundry.domain.results import EvaluationResult, RunConfig, ShapeTiming
from kernelfoundry.domain.tunables import parse_value, value_text
from kernelfoundry.generators.base import GenerationUsage
from kernelfoundry.tasks.model import Budget, ShapeVariant, Task, TaskError, Tolerance
from kernelfoundry.v1 import evaluation_pb2, kernel_pb2, lineage_pb2, run_pb2, search_pb2, task_pb2


def descriptors_to_proto(d: Descriptors) -> kernel_pb2.Descriptors:
    """One protobuf field per descriptor axis, named like it (kernelfoundry.domain.descriptors.AXES)."""
    return kernel_pb2.Descriptors(**d.as_dict())


def descriptors_from_proto(p: kernel_pb2.Descriptors) -> Descriptors:
    return Descriptors.from_levels(p)


def kernel_to_proto(k: KernelSource) -> kernel_pb2.KernelSource:
    return kernel_pb2.KernelSource(
        language=k.language,
        code=k.code,
        entry_point=k.entry_point,
        glue=k.glue,
        tunables=[
            kernel_pb2.Tunable(
                name=t.name,
                values=[value_text(v) for v in t.values],
                default_value=value_text(t.default),
            )
            for t in k.tunables
        ],
        params={name: value_text(v) for name, v in k.params.items()},
    )


def kernel_from_proto(p: kernel_pb2.KernelSource) -> KernelSource:
    if p.language not in ("cpp", "cuda"):
        raise ValueError(f"unknown kernel language {p.language!r} (expected cpp or cuda)")
    return KernelSource(
        language=p.language,  # type: ignore[arg-type]
        code=p.code,
        entry_point=p.entry_point or "kf_forward",
        glue=p.glue,
        tunables=tuple(
            Tunable(
                name=t.name,
                values=tuple(parse_value(v) for v in t.values),
                default=parse_value(t.default_value),
            )
            for t in p.tunables
        ),
        params={name: parse_value(v) for name, v in sorted(p.params.items())},
    )


def _literal(name: str, text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise TaskError("bad_shape", f"shape override `{name}` is not a Python literal: {text!r}") from exc


def task_to_proto(t: Task) -> task_pb2.Task:
    message = task_pb2.Task(
        name=t.name,
        reference_source=t.reference_source,
        instructions=t.instructions,
        shapes=[
            task_pb2.ShapeVariant(name=s.name, overrides={k: repr(v) for k, v in s.overrides.items()})
            for s in t.shapes
        ],
        seeds=t.seeds,
        targets=list(t.targets),
        budget=task_pb2.Budget(
            iterations=t.budget.iterations,
            wall_time_s=t.budget.wall_time_s or 0.0,
            evaluations=t.budget.evaluations or 0,
            patience=t.budget.patience or 0,
        ),
        initial_kernels=[kernel_to_proto(k) for k in t.initial_kernels],
    )
    if t.tolerance is not None:
        message.tolerance.CopyFrom(task_pb2.Tolerance(atol=t.tolerance.atol, rtol=t.tolerance.rtol))
    return message


def task_from_proto(p: task_pb2.Task) -> Task:
    shapes = tuple(
        ShapeVariant(
            name=s.name or f"shape{i}", overrides={k: _literal(k, v) for k, v in sorted(s.overrides.items())}
        )
        for i, s in enumerate(p.shapes)
    ) or (ShapeVariant("default"),)
    return Task(
        name=p.name,
        reference_source=p.reference_source,
        instructions=p.instructions,
        shapes=shapes,
        tolerance=Tolerance(p.tolerance.atol, p.tolerance.rtol) if p.HasField("tolerance") else None,
        seeds=p.seeds or 5,
        targets=tuple(p.targets) or ("cpu",),
        budget=Budget(
            iterations=p.budget.iterations or Budget().iterations,
            wall_time_s=p.budget.wall_time_s or None,
            evaluations=p.budget.evaluations or None,
            patience=p.budget.patience or None,
        ),
        initial_kernels=tuple(kernel_from_proto(k) for k in p.initial_kernels),
    )


def run_config_to_proto(c: RunConfig) -> run_pb2.RunConfig:
    return run_pb2.RunConfig(
        hardware=c.hardware,
        generator=c.generator,
        iterations=c.iterations,
        population=c.population,
        sweeps=c.sweeps,
        seed=c.seed,
        islands=c.islands,
    )


def run_config_from_proto(p: run_pb2.RunConfig) -> RunConfig:
    return RunConfig(
        hardware=p.hardware,
        generator=p.generator,
        iterations=p.iterations,
        population=p.population,
        islands=p.islands,
        sweeps=p.sweeps,
        seed=p.seed,
    )


def shape_timing_from_proto(p: evaluation_pb2.ShapeTiming) -> ShapeTiming:
    return ShapeTiming(
        shape=p.shape,
        runtime_ms=p.runtime_ms,
        baseline_ms=p.baseline_ms,
        compile_baseline_ms=p.compile_baseline_ms,
    )


def evaluation_from_proto(p: evaluation_pb2.EvaluationFinished) -> EvaluationResult:
    """An evaluation event's result."""
    return EvaluationResult(
        candidate_id=p.candidate_id,
        correct=p.correct,
        reason=p.reason,
        message=p.message,
        runtime_ms=p.runtime_ms,
        runtime_spread_ms=p.runtime_spread_ms,
        baseline_ms=p.baseline_ms,
        compile_baseline_ms=p.compile_baseline_ms,
        speedup=p.speedup,
        max_abs_error=p.max_abs_error,
        shapes=tuple(shape_timing_from_proto(s) for s in p.shapes),
        screened=p.screened,
        roofline_fraction=p.roofline_fraction,
        bound=p.bound,
    )


def shape_timings_from_details(details_json: str) -> tuple[ShapeTiming, ...]:
    """Per-shape timings from a stored evaluation report's JSON (its `per_shape` list), if any."""
    try:
        details = json.loads(details_json) if details_json else {}
    except json.JSONDecodeError:
        return ()
    shapes = details.get("per_shape") if isinstance(details, dict) else None
    return tuple(
        ShapeTiming(
            shape=s["shape"],
            runtime_ms=float(s.get("runtime_ms") or 0.0),
            baseline_ms=float(s.get("baseline_ms") or 0.0),
            compile_baseline_ms=float(s.get("compile_baseline_ms") or 0.0),
        )
        for s in (shapes if isinstance(shapes, list) else [])
        if isinstance(s, dict) and isinstance(s.get("shape"), str)
    )


def _details(details_json: str) -> dict[str, Any]:
    try:
        details = json.loads(details_json) if details_json else {}
    except json.JSONDecodeError:
        return {}
    return details if isinstance(details, dict) else {}


def screened_in_details(details_json: str) -> bool:
    """Whether a stored evaluation report says its times come from a screen only."""
    return bool(_details(details_json).get("screened"))


def _detail_float(details_json: str, key: str) -> float:
    value = _details(details_json).get(key)
    return float(value) if isinstance(value, int | float) else 0.0


def _detail_str(details_json: str, key: str) -> str:
    value = _details(details_json).get(key)
    return value if isinstance(value, str) else ""


def evaluation_from_record(r: lineage_pb2.EvaluationRecord) -> EvaluationResult:
    """A stored evaluation's result (the lineage keeps no runtime spread: 0, not measured)."""
    return EvaluationResult(
        candidate_id=r.candidate_id,
        correct=r.correct,
        reason=r.reason,
        message=r.message,
        runtime_ms=r.runtime_ms,
        baseline_ms=r.baseline_ms,
        compile_baseline_ms=r.compile_baseline_ms,
        speedup=r.speedup,
        max_abs_error=r.max_abs_error,
        shapes=shape_timings_from_details(r.details_json),
        screened=screened_in_details(r.details_json),
        roofline_fraction=_detail_float(r.details_json, "roofline_fraction"),
        bound=_detail_str(r.details_json, "bound"),
    )


def usage_from_proto(p: search_pb2.GenerationUsage | lineage_pb2.UsageRecord) -> GenerationUsage:
    """One request's tokens and cost, from its CandidatesGenerated event or its lineage record."""
    return GenerationUsage(p.prompt_tokens, p.completion_tokens, p.cost_usd)
