"""Instantiating a task's reference program: the module, its model and its inputs.

Executes user-provided Python (the reference source): callers that must survive a hostile or broken
task run this in a child process (see kernelfoundry.tasks.validation). Imports torch lazily so the
task model stays importable without it.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelfoundry.tasks.model import ShapeVariant, Task, TaskError

REFERENCE_MODULE_NAME = "kf_reference"


def load_reference_module(source: str, overrides: Mapping[str, Any] | None = None) -> types.ModuleType:
    """Execute the reference source as a fresh module, then apply shape overrides to its globals.

    Raises TaskError(import_error | missing_model | missing_get_inputs) naming the problem.
    """
    module = types.ModuleType(REFERENCE_MODULE_NAME)
    module.__file__ = f"<{REFERENCE_MODULE_NAME}>"
    try:
        code = compile(source, module.__file__, "exec")
        exec(code, module.__dict__)
    except Exception as exc:  # user code: any failure is a task error
        raise TaskError(
            "import_error", f"reference source failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(module.__dict__.get("Model"), type):
        raise TaskError("missing_model", "reference source defines no class `Model`")
    if not callable(module.__dict__.get("get_inputs")):
        raise TaskError("missing_get_inputs", "reference source defines no function `get_inputs()`")
    for name, value in (overrides or {}).items():
        if name not in module.__dict__:
            raise TaskError("bad_shape", f"shape override `{name}` is not a global of the reference source")
        module.__dict__[name] = value
    return module


@dataclass
class ReferenceInstance:
    """One materialised reference: the model (in eval mode) and one set of inputs."""

    module: types.ModuleType
    model: Any  # torch.nn.Module
    inputs: list[Any]  # tensors (and scalars as given by get_inputs)
    init_inputs: list[Any]


def instantiate(task: Task, shape: ShapeVariant, seed: int, device: str = "cpu") -> ReferenceInstance:
    """Build the model and one input set for `shape`, deterministically from `seed`.

    The model's parameters are drawn with seed 0 for every shape so that all input sets of a task see
    the same weights; inputs are drawn with `seed`, the task's factory calls (torch.randn ...) running on
    `device`. Raises TaskError(reference_error) if user code fails.
    """
    import torch

    module = load_reference_module(task.reference_source, shape.overrides)
    get_init = module.__dict__.get("get_init_inputs", lambda: [])
    try:
        torch.manual_seed(0)
        init_inputs = list(get_init())
        model = module.Model(*init_inputs)
        model = model.to(device).eval()
        torch.manual_seed(seed)
        # Drawn on the device itself: an evaluation builds about ten input sets, and drawing a task
        # sized for an H200 (hundreds of MB) on the host and copying it over took seconds each time.
        with torch.device(device):
            drawn = module.get_inputs()
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in drawn]
    except TaskError:
        raise
    except Exception as exc:
        raise TaskError(
            "reference_error",
            f"building the reference failed for shape `{shape.name}`: {type(exc).__name__}: {exc}",
        ) from exc
    return ReferenceInstance(module=module, model=model, inputs=inputs, init_inputs=init_inputs)
