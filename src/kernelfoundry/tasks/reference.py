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


def build_model(module: types.ModuleType, shape: ShapeVariant, device: str = "cpu") -> tuple[Any, list[Any]]:
    """`Model(*get_init_inputs())` on `device`, in eval mode, parameters drawn with seed 0.

    Raises TaskError(bad_init_inputs) when get_init_inputs() returns something that is not a list of
    arguments or Model rejects them, TaskError(reference_error) when Model itself fails.
    """
    import torch

    get_init = module.__dict__.get("get_init_inputs", lambda: [])
    torch.manual_seed(0)
    try:
        returned = get_init()
    except Exception as exc:
        raise TaskError(
            "bad_init_inputs", f"shape `{shape.name}`: get_init_inputs() raised {type(exc).__name__}: {exc}"
        ) from exc
    init_inputs = _argument_list(returned, "get_init_inputs()", "bad_init_inputs", shape)
    problem = _binding_problem(module.Model, init_inputs)
    if problem:
        raise TaskError(
            "bad_init_inputs",
            f"shape `{shape.name}`: Model{problem[0]} cannot take the {len(init_inputs)} argument(s) "
            f"get_init_inputs() returned ({_describe(init_inputs)}): {problem[1]}",
        )
    try:
        model = construct_on(module.Model, init_inputs, device)
    except Exception as exc:
        raise _reference_error(shape, "building Model", exc) from exc
    try:
        return model.to(device).eval(), init_inputs
    except Exception as exc:
        raise _reference_error(shape, f"moving Model to {device}", exc) from exc


def construct_on(model_class: Any, init_inputs: list[Any], device: str) -> Any:
    """`model_class(*init_inputs)` with its factory calls running on `device` (seed 0): a Linear of
    32768 x 32768 initialised on the host took seconds per evaluation on the H200's host. A Model whose
    construction fails there is built on the host, seed 0 again, and moved by the caller."""
    import torch

    if device == "cpu":
        return model_class(*init_inputs)
    try:
        with torch.device(device):
            return model_class(*init_inputs)
    except Exception:
        torch.manual_seed(0)
        return model_class(*init_inputs)


def draw_inputs(module: types.ModuleType, shape: ShapeVariant, seed: int, device: str = "cpu") -> list[Any]:
    """One input set from `get_inputs()`, drawn with `seed` by factory calls running on `device`.

    Inputs must be a list (or tuple) of tensors and Python numbers; anything else raises
    TaskError(bad_inputs) naming the item, before forward() could fail on it with a puzzling message.
    """
    import torch

    torch.manual_seed(seed)
    try:
        # Drawn on the device itself: an evaluation builds about ten input sets, and drawing a task
        # sized for an H200 (hundreds of MB) on the host and copying it over took seconds each time.
        with torch.device(device):
            returned = module.get_inputs()
    except Exception as exc:
        raise TaskError(
            "bad_inputs", f"shape `{shape.name}`: get_inputs() raised {type(exc).__name__}: {exc}"
        ) from exc
    drawn = _argument_list(returned, "get_inputs()", "bad_inputs", shape)
    for index, item in enumerate(drawn):
        if not isinstance(item, torch.Tensor | bool | int | float):
            raise TaskError(
                "bad_inputs",
                f"shape `{shape.name}`: get_inputs() item {index} is a {type(item).__name__}; "
                "inputs must be tensors or Python numbers (int, float, bool)",
            )
    try:
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in drawn]
    except Exception as exc:
        raise _reference_error(shape, f"moving the inputs to {device}", exc) from exc


def instantiate(task: Task, shape: ShapeVariant, seed: int, device: str = "cpu") -> ReferenceInstance:
    """Build the model and one input set for `shape`, deterministically from `seed`.

    The model's parameters are drawn with seed 0 for every shape so that all input sets of a task see
    the same weights; inputs are drawn with `seed`, the task's factory calls (torch.randn ...) running on
    `device`. Raises TaskError (bad_init_inputs, bad_inputs, reference_error) if user code fails.
    """
    module = load_reference_module(task.reference_source, shape.overrides)
    model, init_inputs = build_model(module, shape, device)
    inputs = draw_inputs(module, shape, seed, device)
    return ReferenceInstance(module=module, model=model, inputs=inputs, init_inputs=init_inputs)


def forward_arity_problem(model: Any, inputs: list[Any]) -> str | None:
    """Why `model(*inputs)` cannot bind (forward() wants other arguments than get_inputs() gives), or None."""
    problem = _binding_problem(model.forward, inputs)
    if problem is None:
        return None
    return (
        f"forward{problem[0]} cannot take the {len(inputs)} input(s) get_inputs() returned "
        f"({_describe(inputs)}): {problem[1]}"
    )


def _binding_problem(function: Any, arguments: list[Any]) -> tuple[str, str] | None:
    """(signature, why) when `function(*arguments)` cannot bind; None when it can or cannot be told."""
    import inspect

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*arguments)
    except TypeError as exc:
        return str(signature), str(exc)
    return None


def _argument_list(returned: Any, producer: str, reason: str, shape: ShapeVariant) -> list[Any]:
    import torch

    if isinstance(returned, torch.Tensor):
        raise TaskError(
            reason,
            f"shape `{shape.name}`: {producer} returned a bare tensor of shape {list(returned.shape)}; "
            "it must return a list of arguments, e.g. [x]",
        )
    if not isinstance(returned, list | tuple):
        raise TaskError(
            reason,
            f"shape `{shape.name}`: {producer} returned a {type(returned).__name__}; "
            "it must return a list of arguments",
        )
    return list(returned)


def _describe(values: list[Any]) -> str:
    import torch

    parts = []
    for value in values[:8]:
        if isinstance(value, torch.Tensor):
            parts.append(f"tensor {list(value.shape)}")
        else:
            parts.append(type(value).__name__)
    if len(values) > 8:
        parts.append(f"... {len(values) - 8} more")
    return ", ".join(parts) or "nothing"


def _reference_error(shape: ShapeVariant, step: str, exc: Exception) -> TaskError:
    return TaskError(
        "reference_error",
        f"building the reference failed for shape `{shape.name}` ({step}): {type(exc).__name__}: {exc}",
    )
