"""What validating a task learned about it: per shape, the inputs, outputs, parameters and runtime.

Pure data with a JSON form (`to_dict`/`from_dict`): it crosses a process boundary as JSON (never as
pickle: it is produced next to untrusted code) and is shown to users and generators.

Besides the facts, a shape's summary records two decisions the evaluator reads:
  * `output_checks`: per output, which check tells a right answer from a trivial one. `tolerance`:
    KernelBench's tolerance does (the output is larger than atol, varies more than the tolerance and
    changes with the inputs). `scale_aware`: every value is within atol of zero, so zeros would pass;
    the comparison must be relative to the output's own scale. `variation`: the output is (nearly)
    constant, or changes with the inputs by less than the tolerance, so a constant would pass; the
    candidate's variation (over the elements and between input sets) must match the reference's.
    `input_independent`: the output is bit-for-bit the same for two input sets (exactly zero, say: a
    GEMM's row maximum minus its own mean). KernelBench scores such tasks, so they are accepted, but a
    kernel that writes the constant is right by definition; the summary's notes say so.
  * `reference_precision`: `float64` where the device holds the widened reference beside the task's own
    run, else `float32 (TF32 off)` (the engine's names), with the memory estimate that decided it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

OUTPUT_CHECK_TOLERANCE = "tolerance"
OUTPUT_CHECK_SCALE_AWARE = "scale_aware"
OUTPUT_CHECK_VARIATION = "variation"
OUTPUT_CHECK_INPUT_INDEPENDENT = "input_independent"
OUTPUT_CHECKS = (
    OUTPUT_CHECK_TOLERANCE,
    OUTPUT_CHECK_SCALE_AWARE,
    OUTPUT_CHECK_VARIATION,
    OUTPUT_CHECK_INPUT_INDEPENDENT,
)
PRECISION_FLOAT64 = "float64"
PRECISION_FLOAT32 = "float32 (TF32 off)"
DEPTH_VALUES = "values"  # the reference ran at this shape's sizes and its outputs were judged
DEPTH_STRUCTURE = "structure"  # run on the meta device only: shapes and memory, no values
# A stand-in device (the CPU for a CUDA run where CUDA is unavailable): structure and memory at the real
# size, values and output checks at reduced sizes (kernelfoundry.tasks.scaling; the notes name them)
DEPTH_REDUCED_VALUES = "reduced_values"


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without "torch." ("float32"); for scalars the Python type ("int")
    scalar: bool = False  # a Python scalar from get_inputs() (the ABI passes it as a 0-d tensor)


@dataclass(frozen=True)
class OutputCheck:
    policy: str  # one of OUTPUT_CHECKS
    reason: str  # the figures behind the choice, for people


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one evaluation of a shape holds on its device, from a run on the meta device."""

    device: str
    inputs_bytes: int
    parameters_bytes: int  # parameters and buffers
    outputs_bytes: int
    intermediates_bytes: int  # the largest set of forward() temporaries alive at once
    need_bytes: int  # the task's own run: everything above, plus a second input set's outputs
    wide_need_bytes: int  # the float64 reference beside it (floating tensors widened)
    available_bytes: int  # free on the device when validated (host: also under the child's limit)
    total_bytes: int


@dataclass(frozen=True)
class ShapeSummary:
    name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    parameter_count: int  # elements over all parameters
    buffer_count: int  # elements over all buffers
    reference_runtime_ms: float  # median eager forward on the validation device; 0 when not run
    output_checks: tuple[OutputCheck, ...] = ()
    reference_precision: str = PRECISION_FLOAT64
    memory: MemoryEstimate | None = None
    depth: str = DEPTH_VALUES


@dataclass(frozen=True)
class TaskSummary:
    task: str
    device: str  # where the values were checked
    shapes: tuple[ShapeSummary, ...]
    requested_device: str = ""  # the run's target ("cpu", "cuda"); empty in older records
    notes: tuple[str, ...] = ()  # what validation decided that a user should know (fallbacks, depth)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskSummary:
        return cls(
            task=data["task"],
            device=data["device"],
            shapes=tuple(_shape(shape) for shape in data["shapes"]),
            requested_device=str(data.get("requested_device", "")),
            notes=tuple(str(note) for note in data.get("notes", ())),
        )


def _shape(data: dict[str, Any]) -> ShapeSummary:
    memory = data.get("memory")
    return ShapeSummary(
        name=data["name"],
        inputs=tuple(_tensor(t) for t in data["inputs"]),
        outputs=tuple(_tensor(t) for t in data["outputs"]),
        parameter_count=int(data["parameter_count"]),
        buffer_count=int(data["buffer_count"]),
        reference_runtime_ms=float(data["reference_runtime_ms"]),
        output_checks=tuple(
            OutputCheck(policy=str(check["policy"]), reason=str(check["reason"]))
            for check in data.get("output_checks", ())
        ),
        reference_precision=str(data.get("reference_precision", PRECISION_FLOAT64)),
        memory=MemoryEstimate(**{k: (v if k == "device" else int(v)) for k, v in memory.items()})
        if memory
        else None,
        depth=str(data.get("depth", DEPTH_VALUES)),
    )


def _tensor(data: dict[str, Any]) -> TensorInfo:
    return TensorInfo(
        shape=tuple(int(n) for n in data["shape"]), dtype=str(data["dtype"]), scalar=bool(data["scalar"])
    )
