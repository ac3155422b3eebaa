"""Conversions between the wire messages (kernelfoundry.v1 protobuf) and the domain's dataclasses.

The domain never sees protobuf; adapters call these at the boundary. Shape overrides travel as Python
literals (`repr`) and come back through `ast.literal_eval`, never `eval`.
"""

from __future__ import annotations

import ast
from typing import Any

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.kernel import KernelSource, Tunable, TunableValue
from kernelfoundry.tasks.model import Budget, ShapeVariant, Task, TaskError, Tolerance
from kernelfoundry.v1 import kernel_pb2, task_pb2


def descriptors_to_proto(d: Descriptors) -> kernel_pb2.Descriptors:
    return kernel_pb2.Descriptors(memory=d.memory, algorithm=d.algorithm, parallelism=d.parallelism)


def descriptors_from_proto(p: kernel_pb2.Descriptors) -> Descriptors:
    return Descriptors(memory=p.memory, algorithm=p.algorithm, parallelism=p.parallelism)


def _value_to_text(value: TunableValue) -> str:
    return str(value)


def _value_from_text(text: str) -> TunableValue:
    try:
        return int(text)
    except ValueError:
        return text


def kernel_to_proto(k: KernelSource) -> kernel_pb2.KernelSource:
    return kernel_pb2.KernelSource(
        language=k.language,
        code=k.code,
        entry_point=k.entry_point,
        glue=k.glue,
        tunables=[
            kernel_pb2.Tunable(
                name=t.name,
                values=[_value_to_text(v) for v in t.values],
                default_value=_value_to_text(t.default),
            )
            for t in k.tunables
        ],
        params={name: _value_to_text(v) for name, v in k.params.items()},
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
                values=tuple(_value_from_text(v) for v in t.values),
                default=_value_from_text(t.default_value),
            )
            for t in p.tunables
        ),
        params={name: _value_from_text(v) for name, v in sorted(p.params.items())},
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
