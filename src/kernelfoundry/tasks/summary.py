"""What validating a task learned about it: per shape, the inputs, outputs, parameters and runtime.

Pure data with a JSON form (`to_dict`/`from_dict`): it crosses a process boundary as JSON (never as
pickle: it is produced next to untrusted code) and is shown to users and generators.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without "torch." ("float32"); for scalars the Python type ("int")
    scalar: bool = False  # a Python scalar from get_inputs() (the ABI passes it as a 0-d tensor)


@dataclass(frozen=True)
class ShapeSummary:
    name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    parameter_count: int  # elements over all parameters
    buffer_count: int  # elements over all buffers
    reference_runtime_ms: float  # median eager forward on the validation device


@dataclass(frozen=True)
class TaskSummary:
    task: str
    device: str
    shapes: tuple[ShapeSummary, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskSummary:
        return cls(
            task=data["task"],
            device=data["device"],
            shapes=tuple(
                ShapeSummary(
                    name=shape["name"],
                    inputs=tuple(_tensor(t) for t in shape["inputs"]),
                    outputs=tuple(_tensor(t) for t in shape["outputs"]),
                    parameter_count=int(shape["parameter_count"]),
                    buffer_count=int(shape["buffer_count"]),
                    reference_runtime_ms=float(shape["reference_runtime_ms"]),
                )
                for shape in data["shapes"]
            ),
        )


def _tensor(data: dict[str, Any]) -> TensorInfo:
    return TensorInfo(
        shape=tuple(int(n) for n in data["shape"]), dtype=str(data["dtype"]), scalar=bool(data["scalar"])
    )
