"""The child side of task validation: runs the reference for every shape and judges its outputs.

Run as `python -m kernelfoundry.tasks.validation_child RESULT_FILE DEVICE` with the
pickled Task on stdin (the parent is trusted; nothing flows back as pickle). It executes user code,
so it runs only in this child, under an address-space limit, dying with its parent. Progress and
the verdict are JSON lines appended to RESULT_FILE (stdout/stderr belong to the user code).
The degeneracy rules live here as plain functions so they can be tested without a child.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import pickle
import resource
import signal
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kernelfoundry.tasks.model import ShapeVariant, Task, TaskError, Tolerance
from kernelfoundry.tasks.reference import instantiate

TIMED_RUNS = 5
TIMING_BUDGET_S = 2.0
SEEDS = (0, 1)  # two input sets: an output that ignores its inputs shows up as unchanged
_HALF_TYPES = ("float16", "bfloat16")
_MEMORY_ERRORS = ("can't allocate memory", "out of memory", "cannot allocate memory")


def default_tolerance(dtype_name: str) -> Tolerance:
    """KernelBench's policy: 1e-2 for half types, 1e-4 for other floats; exact for integers and bools."""
    if dtype_name in _HALF_TYPES:
        return Tolerance(atol=1e-2, rtol=1e-2)
    if dtype_name.startswith(("float", "complex")):
        return Tolerance(atol=1e-4, rtol=1e-4)
    return Tolerance(atol=0.0, rtol=0.0)


def degeneracy(label: str, first: Any, second: Any, inputs_changed: bool, tolerance: Tolerance) -> str | None:
    """Why an output is useless for judging a kernel (a trivial kernel would pass), or None.

    `first`/`second` are the same output for two different input sets (torch tensors).
    """
    import torch

    a = first.detach().to("cpu", torch.float64)
    b = second.detach().to("cpu", torch.float64)
    if a.numel() == 0:
        return f"{label} is empty"
    if not bool(torch.isfinite(a).all()) or not bool(torch.isfinite(b).all()):
        return f"{label} contains NaN or Inf"
    largest = float(a.abs().max())
    if largest <= tolerance.atol:
        return (
            f"{label} is (near) zero: max |value| = {largest:.3g} <= atol {tolerance.atol:g}, "
            "so writing zeros passes"
        )
    if a.numel() > 1:
        spread = float(a.max() - a.min())
        centre = float(a.mean())
        if spread <= tolerance.atol + tolerance.rtol * abs(centre):
            return (
                f"{label} is (near) constant: every element is {centre:.6g} within {spread:.3g}, "
                "so writing that constant passes"
            )
    if (
        inputs_changed
        and a.shape == b.shape
        and torch.allclose(a, b, atol=tolerance.atol, rtol=tolerance.rtol)
    ):
        return f"{label} does not change when the inputs change (input seeds {SEEDS[0]} and {SEEDS[1]})"
    return None


def _outputs(result: Any, shape: ShapeVariant) -> list[Any]:
    import torch

    items = list(result) if isinstance(result, tuple | list) else [result]
    if not items:
        raise TaskError(
            "no_tensor_output", f"shape `{shape.name}`: forward() returned an empty {type(result).__name__}"
        )
    for index, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            where = f"output {index}" if len(items) > 1 else "the output"
            raise TaskError(
                "no_tensor_output",
                f"shape `{shape.name}`: forward() returned {type(item).__name__} as {where}; "
                "a reference must return a tensor or a tuple of tensors",
            )
    return items


def _info(value: Any) -> dict[str, Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."), "scalar": False}
    return {"shape": [], "dtype": type(value).__name__, "scalar": True}


def _forward(instance: Any, shape: ShapeVariant, seed: int) -> Any:
    import torch

    try:
        with torch.no_grad():
            return instance.model(*instance.inputs)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, MemoryError) or any(sign in str(exc).lower() for sign in _MEMORY_ERRORS):
            raise TaskError(
                "resource_limit", f"shape `{shape.name}`: forward() ran out of memory: {text}"
            ) from exc
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise TaskError(
            "reference_error",
            f"shape `{shape.name}`, seed {seed}: forward() raised {text} "
            f"(at {frame.filename}:{frame.lineno})",
        ) from exc


def _same_inputs(first: list[Any], second: list[Any]) -> bool:
    import torch

    for a, b in zip(first, second, strict=True):
        if isinstance(a, torch.Tensor):
            if a.shape != b.shape or not torch.equal(a, b):
                return False
        elif a != b:
            return False
    return True


def _median_runtime_ms(instance: Any, device: str) -> float:
    import torch

    samples: list[float] = []
    deadline = time.perf_counter() + TIMING_BUDGET_S
    with torch.no_grad():
        while len(samples) < TIMED_RUNS and (not samples or time.perf_counter() < deadline):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            instance.model(*instance.inputs)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def validate_shape(task: Task, shape: ShapeVariant, device: str, report: Any) -> dict[str, Any]:
    runs = []
    for seed in SEEDS:
        report(f"shape `{shape.name}`, seed {seed}: building the reference")
        instance = instantiate(task, shape, seed, device)
        report(f"shape `{shape.name}`, seed {seed}: running forward()")
        outputs = _outputs(_forward(instance, shape, seed), shape)
        runs.append((instance, outputs))
    (first, first_out), (second, second_out) = runs
    if len(first_out) != len(second_out):
        raise TaskError(
            "reference_error", f"shape `{shape.name}`: the number of outputs changes with the inputs"
        )
    inputs_changed = not _same_inputs(first.inputs, second.inputs)
    if not inputs_changed and any(hasattr(x, "shape") for x in first.inputs):
        raise TaskError(
            "degenerate_output",
            f"shape `{shape.name}`: get_inputs() returns the same values for seeds {SEEDS[0]} and "
            f"{SEEDS[1]}; inputs must be random (torch.randn, torch.rand, torch.randint) so that a kernel "
            "cannot hard-code the answer",
        )
    for index, (a, b) in enumerate(zip(first_out, second_out, strict=True)):
        dtype = str(a.dtype).removeprefix("torch.")
        tolerance = task.tolerance or default_tolerance(dtype)
        label = f"shape `{shape.name}`: output {index} ({dtype} {list(a.shape)})"
        problem = degeneracy(label, a, b, inputs_changed, tolerance)
        if problem:
            raise TaskError("degenerate_output", problem)
    report(f"shape `{shape.name}`: timing forward()")
    return {
        "name": shape.name,
        "inputs": [_info(x) for x in first.inputs],
        "outputs": [_info(x) for x in first_out],
        "parameter_count": sum(p.numel() for p in first.model.parameters()),
        "buffer_count": sum(b.numel() for b in first.model.buffers()),
        "reference_runtime_ms": _median_runtime_ms(first, device),
    }


def main(argv: list[str]) -> int:
    result_path, device = Path(argv[0]), argv[1]
    _die_with_parent()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    task: Task = pickle.load(sys.stdin.buffer)

    with result_path.open("a", encoding="utf-8") as sink:

        def emit(record: dict[str, Any]) -> None:
            sink.write(json.dumps(record) + "\n")
            sink.flush()

        try:
            shapes = []
            for shape in task.shapes:
                shapes.append(validate_shape(task, shape, device, lambda step: emit({"progress": step})))
            emit({"summary": {"task": task.name, "device": device, "shapes": shapes}})
        except TaskError as exc:
            emit({"error": {"reason": exc.reason, "message": exc.message}})
        except MemoryError:
            emit({"error": {"reason": "resource_limit", "message": "the reference ran out of memory"}})
    return 0


def _die_with_parent() -> None:
    """Ask Linux to kill this child when the validating process dies (no orphans running user code)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
