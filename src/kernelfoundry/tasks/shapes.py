"""Per-backend input sizes for KernelBench-format tasks.

A task file sized to fill a data-centre GPU may declare smaller sizes for CPUs as a module-level literal
`CPU_OVERRIDES = {"batch_size": 256, ...}` (see tasks/README.md). It is read statically (ast), never
executed. Tasks whose shapes were given explicitly (folder format) are left as they are.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Any

from kernelfoundry.tasks.model import DEFAULT_SHAPES, ShapeVariant, Task, TaskError

CPU_OVERRIDES = "CPU_OVERRIDES"


def declared_overrides(source: str, name: str) -> dict[str, Any] | None:
    """The literal dict assigned to module-level `name`, or None when absent."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError as exc:
                raise TaskError("bad_shape", f"`{name}` must be a literal dict of sizes") from exc
            if not isinstance(value, dict):
                raise TaskError("bad_shape", f"`{name}` must be a dict, got {type(value).__name__}")
            return value
    return None


def shapes_for_backend(task: Task, backend: str) -> Task:
    """The task with the input sizes meant for `backend` (CPU_OVERRIDES on cpu, when declared)."""
    if backend != "cpu" or task.shapes != DEFAULT_SHAPES:
        return task
    overrides = declared_overrides(task.reference_source, CPU_OVERRIDES)
    if not overrides:
        return task
    return replace(task, shapes=(ShapeVariant("cpu", overrides),))
