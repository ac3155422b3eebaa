"""The child side of task validation: runs the reference for every shape and judges its outputs.

Run as `python -m kernelfoundry.tasks.validation_child RESULT_FILE DEVICE MEMORY_LIMIT_BYTES` with the
pickled Task on stdin (the parent is trusted; nothing flows back as pickle). It executes user code, so it
runs only in this child, dying with its parent. Progress and the verdict are JSON lines appended to
RESULT_FILE (stdout/stderr belong to the user code).

DEVICE is the run's target: `cpu`, `cuda` or `cuda:N`. A CUDA target is validated on that GPU when this
machine has one, else on the CPU (said in the summary's notes). For every shape:
  1. the reference runs on the meta device: shapes, mistakes in get_inputs()/get_init_inputs(), and the
     bytes it needs (kernelfoundry.tasks.memory), compared with what the device has free. Too large for the
     run's own device: refused (`resource_limit`) with the sizes; too large for a stand-in CPU: only the
     structure is validated. Room for a float64 reference beside it decides `reference_precision`;
  2. the model is built once and forward() runs on two input sets on the device; the outputs' statistics
     (on the device, chunked) pick each output's check (kernelfoundry.tasks.degeneracy) or refuse it;
  3. forward() is timed a few times, for orientation.
`validate_in_process` does the same in the calling process, for tests and benchmarks that walk many tasks.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import pickle
import resource
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kernelfoundry.tasks import memory
from kernelfoundry.tasks.degeneracy import change_between, default_tolerance, output_check, output_stats
from kernelfoundry.tasks.model import ShapeVariant, Task, TaskError
from kernelfoundry.tasks.reference import (
    build_model,
    draw_inputs,
    forward_arity_problem,
    load_reference_module,
)
from kernelfoundry.tasks.summary import (
    DEPTH_REDUCED_VALUES,
    DEPTH_STRUCTURE,
    DEPTH_VALUES,
    OUTPUT_CHECK_INPUT_INDEPENDENT,
    PRECISION_FLOAT32,
    PRECISION_FLOAT64,
)

TIMED_RUNS = 5
TIMING_BUDGET_S = 2.0
SEEDS = (0, 1)  # two input sets: an output that ignores its inputs shows up as unchanged
DEFAULT_MEMORY_LIMIT_BYTES = 16 << 30
# The meta run stops at this many live bytes (a reference that allocates in an endless loop would
# otherwise run until the deadline): far above any device, low enough to be reached in a second.
META_CAP_BYTES = 1 << 42
_MEMORY_ERRORS = ("can't allocate memory", "out of memory", "cannot allocate memory")
# A GPU is shared with the runs' evaluations and other validations, and what they hold now they hold
# only for a while: a shape that fits the device waits for its memory (and an allocation that failed on
# memory someone else held is tried again) instead of being refused for what others happened to hold.
MEMORY_WAIT_S = 180.0
MEMORY_POLL_S = 0.5
MEMORY_RETRIES = 2
GPU_CAPACITY_SHARE = 0.95  # of a GPU's total memory, what one process can count on (others' contexts)

__all__ = ["default_tolerance", "validate_in_process", "validate_shape"]


@dataclass(frozen=True)
class Placement:
    """Where values are checked for a run that targets `requested`."""

    requested: str
    device: str
    is_target: bool  # False: a stand-in (the CPU for a CUDA run on a machine without a GPU)
    note: str = ""


def place(requested: str) -> Placement:
    import torch

    if not requested.startswith("cuda"):
        return Placement(requested, "cpu", True)
    if torch.cuda.is_available():
        index = requested.partition(":")[2] or "0"
        if int(index) < torch.cuda.device_count():
            return Placement(requested, f"cuda:{index}", True)
        return Placement(
            requested, "cuda:0", True, f"{requested} does not exist here; validated on cuda:0 instead"
        )
    why = _why_no_cuda()
    note = f"the run targets {requested} but CUDA is unavailable in the validation child ({why}): "
    return Placement(requested, "cpu", False, note + "validated on the CPU")


def _why_no_cuda() -> str:
    """What torch says when CUDA cannot start (no GPU, no driver, or a sandbox that hides it)."""
    import torch

    try:
        torch.cuda.init()
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:240]}"
    return "no CUDA device is visible"


def _device_memory(device: str, limit_bytes: int) -> memory.DeviceMemory:
    if device.startswith("cuda"):
        return memory.gpu_memory(device)
    return memory.host_memory(limit_bytes, _resident_bytes())


def _capacity(free: memory.DeviceMemory) -> int:
    """What the device could give this process if nothing else held memory (a GPU), or what it has
    (the host: its memory does not come back the same way)."""
    if free.device.startswith("cuda"):
        return int(free.total_bytes * GPU_CAPACITY_SHARE)
    return free.available_bytes


def _wait_for_memory(
    device: str, limit_bytes: int, wanted: int, report: Callable[[str], None], wait_s: float = MEMORY_WAIT_S
) -> memory.DeviceMemory:
    """The device's memory once `wanted` bytes are free, or after `wait_s` (a GPU whose capacity holds
    `wanted`; anything else is answered at once)."""
    free = _device_memory(device, limit_bytes)
    if not device.startswith("cuda") or free.available_bytes >= wanted or wanted > _capacity(free):
        return free
    report(
        f"waiting for {wanted / memory.GIB:.2f} GiB on {device}: {memory.describe_free(free)}, "
        "other processes hold the rest"
    )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and free.available_bytes < wanted:
        time.sleep(MEMORY_POLL_S)
        free = _device_memory(device, limit_bytes)
    return free


def _is_memory_error(text: str) -> bool:
    return any(sign in text.lower() for sign in _MEMORY_ERRORS)


def _retrying_on_memory(
    step: Callable[[], Any], device: str, limit_bytes: int, wanted: int, report: Callable[[str], None]
) -> Any:
    """`step()`, tried again where it ran out of GPU memory that the device could have given it."""
    import torch

    for attempt in range(MEMORY_RETRIES + 1):
        try:
            return step()
        except TaskError as exc:
            last = attempt == MEMORY_RETRIES
            if last or not device.startswith("cuda") or not _is_memory_error(exc.message):
                raise
            torch.cuda.empty_cache()
            report(f"{exc.message[:200]}: trying again once {wanted / memory.GIB:.2f} GiB are free")
            _wait_for_memory(device, limit_bytes, wanted, report)
    raise AssertionError("unreachable")


def _resident_bytes() -> int:
    with contextlib.suppress(OSError, ValueError), open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()
    return 0


def _info(value: Any) -> dict[str, Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."), "scalar": False}
    return {"shape": [], "dtype": type(value).__name__, "scalar": True}


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


def _forward(model: Any, inputs: list[Any], shape: ShapeVariant, seed: int, device: str) -> Any:
    import torch

    problem = forward_arity_problem(model, inputs)
    if problem:
        raise TaskError("bad_inputs", f"shape `{shape.name}`: {problem}")
    try:
        with torch.no_grad():
            return model(*inputs)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, MemoryError) or any(sign in str(exc).lower() for sign in _MEMORY_ERRORS):
            raise TaskError(
                "resource_limit", f"shape `{shape.name}`: forward() ran out of memory on {device}: {text}"
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


def _median_runtime_ms(model: Any, inputs: list[Any], device: str) -> float:
    import torch

    samples: list[float] = []
    deadline = time.perf_counter() + TIMING_BUDGET_S
    with torch.no_grad():
        while len(samples) < TIMED_RUNS and (not samples or time.perf_counter() < deadline):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            model(*inputs)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def _timed_forward(model: Any, inputs: list[Any], shape: ShapeVariant, device: str) -> float:
    """_median_runtime_ms, its failures worded as forward()'s (running out of memory: resource_limit,
    which _retrying_on_memory tries again once the device has the memory)."""
    try:
        return _median_runtime_ms(model, inputs, device)
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, MemoryError) or any(sign in str(exc).lower() for sign in _MEMORY_ERRORS):
            raise TaskError(
                "resource_limit",
                f"shape `{shape.name}`: timing forward() ran out of memory on {device}: {text}",
            ) from exc
        raise TaskError("reference_error", f"shape `{shape.name}`: timing forward() raised {text}") from exc


@dataclass(frozen=True)
class _Estimate:
    meta: memory.MetaRun | None  # None: the meta device cannot run this reference
    memory: dict[str, Any] | None  # the MemoryEstimate as a dict
    precision: str
    values_fit: bool  # False: only a stand-in device is here and the shape does not fit it


def _meta_estimate(
    task: Task, shape: ShapeVariant, placement: Placement, limit_bytes: int, report: Callable[[str], None]
) -> _Estimate:
    """What the shape needs against what the device has; TaskError(resource_limit) if the target lacks it."""
    report(f"shape `{shape.name}`: estimating memory on the meta device")
    free = _device_memory(placement.device, limit_bytes)
    try:
        meta = memory.run_on_meta(task, shape, cap_bytes=META_CAP_BYTES)
    except TaskError:
        raise
    except memory.MetaOverflow as overflow:
        raise TaskError(
            "resource_limit",
            f"shape `{shape.name}`: forward() holds more than {overflow} at once (counted on the meta "
            f"device, before anything was allocated), but there are {memory.describe_free(free)}",
        ) from overflow
    except Exception:  # the meta device cannot run this reference; the real run decides
        return _Estimate(None, None, PRECISION_FLOAT64, True)
    footprint = meta.footprint
    if placement.is_target:
        wide = footprint.need_bytes + footprint.wide_need_bytes
        wanted = wide if wide <= _capacity(free) else footprint.need_bytes
        free = _wait_for_memory(placement.device, limit_bytes, wanted, report)
    estimate = asdict(memory.estimate(footprint, free))
    if footprint.need_bytes > free.available_bytes:
        if placement.is_target:
            busy = (
                f" (it fits the device: other processes held the rest for {MEMORY_WAIT_S:g} s)"
                if footprint.need_bytes <= _capacity(free)
                else ""
            )
            raise TaskError(
                "resource_limit",
                f"shape `{shape.name}` needs {memory.describe_need(footprint)} on {placement.device}, "
                f"but there are {memory.describe_free(free)}{busy}",
            )
        return _Estimate(meta, estimate, PRECISION_FLOAT32, False)
    if footprint.need_bytes + footprint.wide_need_bytes <= free.available_bytes:
        return _Estimate(meta, estimate, PRECISION_FLOAT64, True)
    return _Estimate(meta, estimate, PRECISION_FLOAT32, True)


def validate_shape(
    task: Task,
    shape: ShapeVariant,
    placement: Placement,
    report: Callable[[str], None],
    limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
) -> dict[str, Any]:
    """Validate one shape (see the module docstring); the ShapeSummary as a dict, or TaskError."""
    import torch

    estimated = _meta_estimate(task, shape, placement, limit_bytes, report)
    if not placement.is_target and estimated.meta is not None:
        reduced = _stand_in_sizes(task, shape)
        if reduced:
            return _structure_and_reduced_values(
                task, shape, reduced, placement, estimated, report, limit_bytes
            )
    if not estimated.values_fit and estimated.meta is not None:
        return _structure_only(shape, estimated.meta, estimated)
    estimate, precision = estimated.memory, estimated.precision
    device = placement.device
    report(f"shape `{shape.name}`: building the reference on {device}")
    module = load_reference_module(task.reference_source, shape.overrides)
    model, _ = build_model(module, shape, device)
    runs: list[tuple[list[Any], list[Any]]] = []  # (inputs, outputs) per seed
    wanted = estimated.meta.footprint.need_bytes if estimated.meta is not None else 0

    def run_seed(reference: Any, seed: int) -> tuple[list[Any], list[Any]]:
        inputs = draw_inputs(module, shape, seed, device)
        return inputs, _outputs(_forward(reference, inputs, shape, seed, device), shape)

    for seed in SEEDS:
        report(f"shape `{shape.name}`, seed {seed}: running forward() on {device}")
        step = functools.partial(run_seed, model, seed)
        runs.append(_retrying_on_memory(step, device, limit_bytes, wanted, report))
    (inputs_first, first_outputs), (inputs_second, second_outputs) = runs
    if len(first_outputs) != len(second_outputs):
        raise TaskError(
            "reference_error", f"shape `{shape.name}`: the number of outputs changes with the inputs"
        )
    inputs_seen = [inputs_first, inputs_second]
    inputs_changed = not _same_inputs(*inputs_seen)
    if not inputs_changed and any(isinstance(x, torch.Tensor) for x in inputs_seen[0]):
        raise TaskError(
            "degenerate_output",
            f"shape `{shape.name}`: get_inputs() returns the same values for seeds {SEEDS[0]} and "
            f"{SEEDS[1]}; inputs must be random (torch.randn, torch.rand, torch.randint) so that a kernel "
            "cannot hard-code the answer",
        )
    checks = []
    for index, (first, second) in enumerate(zip(first_outputs, second_outputs, strict=True)):
        label = f"shape `{shape.name}`: output {index} ({_dtype(first)} {list(first.shape)})"
        tolerance = task.tolerance or default_tolerance(_dtype(first))
        change = change_between(second, first, tolerance) if inputs_changed else None
        check = output_check(label, output_stats(first), output_stats(second), change, tolerance)
        checks.append(asdict(check))
    input_info = [_info(x) for x in inputs_seen[0]]
    output_info = [_info(x) for x in first_outputs]
    timing_inputs = inputs_seen[-1]
    # the seeds' outputs and the first inputs are done with: their memory is the timing's
    del runs, inputs_seen, inputs_first, inputs_second, first_outputs, second_outputs, step
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    report(f"shape `{shape.name}`: timing forward()")
    timing = functools.partial(_timed_forward, model, timing_inputs, shape, device)
    runtime = _retrying_on_memory(timing, device, limit_bytes, wanted, report)
    summary = {
        "name": shape.name,
        "inputs": input_info,
        "outputs": output_info,
        "parameter_count": sum(p.numel() for p in model.parameters()),
        "buffer_count": sum(b.numel() for b in model.buffers()),
        "reference_runtime_ms": runtime,
        "output_checks": checks,
        "reference_precision": precision,
        "memory": estimate,
        "depth": DEPTH_VALUES,
    }
    del model, timing, timing_inputs
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return summary


def _structure_only(shape: ShapeVariant, meta: memory.MetaRun, estimated: _Estimate) -> dict[str, Any]:
    outputs = _outputs(meta.outputs, shape)
    return {
        "name": shape.name,
        "inputs": [_info(x) for x in meta.inputs],
        "outputs": [_info(x) for x in outputs],
        "parameter_count": sum(p.numel() for p in meta.model.parameters()),
        "buffer_count": sum(b.numel() for b in meta.model.buffers()),
        "reference_runtime_ms": 0.0,
        "output_checks": [],
        "reference_precision": estimated.precision,
        "memory": estimated.memory,
        "depth": DEPTH_STRUCTURE,
    }


def _stand_in_sizes(task: Task, shape: ShapeVariant) -> dict[str, Any]:
    """Reduced sizes (kernelfoundry.tasks.scaling) for checking values on a stand-in CPU; {} for none.

    Only for a shape that keeps the file's own sizes: sizes a task chose explicitly are its to keep.
    """
    if shape.overrides:
        return {}
    try:
        from kernelfoundry.tasks.scaling import reduced_sizes

        return dict(reduced_sizes(task.reference_source))
    except Exception:  # no reduction: the values are checked at the real size when they fit
        return {}


def _structure_and_reduced_values(
    task: Task,
    shape: ShapeVariant,
    reduced: dict[str, Any],
    placement: Placement,
    estimated: _Estimate,
    report: Callable[[str], None],
    limit_bytes: int,
) -> dict[str, Any]:
    """The real size's structure and memory, and output checks from a run at reduced sizes on the stand-in."""
    assert estimated.meta is not None
    summary = _structure_only(shape, estimated.meta, estimated)
    on_stand_in = Placement(placement.requested, placement.device, True)
    values = validate_shape(task, ShapeVariant(shape.name, reduced), on_stand_in, report, limit_bytes)
    summary["output_checks"] = values["output_checks"]
    summary["depth"] = DEPTH_REDUCED_VALUES
    summary["reduced_sizes"] = {name: list(v) if isinstance(v, tuple) else v for name, v in reduced.items()}
    return summary


def _dtype(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def validate_in_process(
    task: Task,
    requested_device: str = "cpu",
    report: Callable[[str], None] = lambda step: None,
    limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
) -> dict[str, Any]:
    """The TaskSummary (as a dict) of `task`, validated in this process; raises TaskError.

    Executes the reference here: only for the child below and for tests or benchmarks of trusted tasks.
    """
    placement = place(requested_device)
    shapes = [validate_shape(task, shape, placement, report, limit_bytes) for shape in task.shapes]
    notes = [placement.note] if placement.note else []
    for shape in shapes:
        if shape["depth"] == DEPTH_REDUCED_VALUES:
            notes.append(
                f"shape `{shape['name']}`: structure and memory at its real size (meta device); values and "
                f"output checks at reduced sizes {shape.pop('reduced_sizes')} on {placement.device}"
            )
        if shape["depth"] == DEPTH_STRUCTURE:
            notes.append(
                f"shape `{shape['name']}` does not fit {placement.device}: only its structure was validated "
                "(meta device); its values are checked by the executor on the target"
            )
        notes.extend(
            check["reason"]
            for check in shape["output_checks"]
            if check["policy"] == OUTPUT_CHECK_INPUT_INDEPENDENT
        )
        if shape["reference_precision"] == PRECISION_FLOAT32 and shape["depth"] == DEPTH_VALUES:
            notes.append(
                f"shape `{shape['name']}`: no room for a float64 reference on {placement.device}; "
                "the reference runs in float32 with TF32 off"
            )
    return {
        "task": task.name,
        "device": placement.device,
        "requested_device": requested_device,
        "shapes": shapes,
        "notes": notes,
    }


def main(argv: list[str]) -> int:
    result_path, device = Path(argv[0]), argv[1]
    limit_bytes = int(argv[2]) if len(argv) > 2 else DEFAULT_MEMORY_LIMIT_BYTES
    _die_with_parent()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    task: Task = pickle.load(sys.stdin.buffer)

    with result_path.open("a", encoding="utf-8") as sink:

        def emit(record: dict[str, Any]) -> None:
            sink.write(json.dumps(record) + "\n")
            sink.flush()

        try:
            summary = validate_in_process(task, device, lambda step: emit({"progress": step}), limit_bytes)
            emit({"summary": summary})
        except TaskError as exc:
            emit({"error": {"reason": exc.reason, "message": exc.message}})
        except MemoryError:
            emit({"error": {"reason": "resource_limit", "message": "the reference ran out of host memory"}})
    return 0


def _die_with_parent() -> None:
    """Ask Linux to kill this child when the validating process dies (no orphans running user code)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
