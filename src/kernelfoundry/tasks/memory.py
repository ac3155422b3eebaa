"""How much memory a task's reference needs on a device, and how much the device has.

The need comes from running the reference on torch's meta device (shapes and dtypes only: no data, no
arithmetic, milliseconds even for a task with inputs of several GB): the bytes of its inputs, parameters and
outputs, and the largest set of forward() temporaries alive at once (counted by a dispatch mode that adds a
tensor's bytes when an op creates it and subtracts them when Python frees it). The free memory comes from
/proc/meminfo for the host and torch.cuda.mem_get_info for a GPU. It executes the reference's code, so it
runs only in the validation child (kernelfoundry.tasks.validation_child), never in a service process.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from kernelfoundry.stack.hardware import host_meminfo, parse_meminfo
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import build_model, draw_inputs, load_reference_module
from kernelfoundry.tasks.summary import MemoryEstimate

GIB = float(1 << 30)
WIDE_ITEMSIZE = 8  # the float64 reference widens every floating tensor to 8 bytes an element


@dataclass(frozen=True)
class Footprint:
    """Bytes of one forward() of a shape, from the meta device; `wide_*` as the float64 reference."""

    inputs_bytes: int
    parameters_bytes: int
    outputs_bytes: int
    peak_bytes: int  # forward() temporaries and outputs alive at once, at their largest
    wide_inputs_bytes: int
    wide_parameters_bytes: int
    wide_outputs_bytes: int
    wide_peak_bytes: int

    @property
    def intermediates_bytes(self) -> int:
        return max(0, self.peak_bytes - self.outputs_bytes)

    @property
    def need_bytes(self) -> int:
        """The task's own run: parameters, one input set, forward()'s peak, a second set's outputs kept."""
        return self.parameters_bytes + self.inputs_bytes + self.peak_bytes + self.outputs_bytes

    @property
    def wide_need_bytes(self) -> int:
        """The float64 reference held beside the task's own run (its model, inputs, peak and outputs)."""
        wide_held = self.wide_parameters_bytes + self.wide_inputs_bytes + self.wide_outputs_bytes
        return wide_held + self.wide_peak_bytes


@dataclass(frozen=True)
class DeviceMemory:
    device: str
    available_bytes: int
    total_bytes: int
    source: str  # where the figures come from, for messages ("MemAvailable", "cudaMemGetInfo", ...)


def tensor_bytes(value: Any) -> tuple[int, int]:
    """(bytes, bytes as float64 when floating) of a tensor; (0, 0) for anything else."""
    import torch

    if not isinstance(value, torch.Tensor):
        return 0, 0
    size = value.numel() * value.element_size()
    wide = value.numel() * WIDE_ITEMSIZE if value.is_floating_point() else size
    return size, wide


class MetaOverflow(Exception):
    """forward() on the meta device holds more live bytes than the cap: it cannot fit (or never ends)."""

    def __init__(self, live_bytes: int) -> None:
        super().__init__(f"{live_bytes / GIB:.2f} GiB of live tensors")
        self.live_bytes = live_bytes


class LiveBytes:
    """A dispatch mode (built lazily: torch is imported by the caller) counting bytes of live op results.

    Past `cap_bytes` it raises MetaOverflow: on the meta device a loop that allocates without end would
    otherwise run until the deadline, since nothing is ever really allocated.
    """

    def __init__(self, cap_bytes: int | None = None) -> None:
        self.live = self.peak = self.wide_live = self.wide_peak = 0
        self.cap_bytes = cap_bytes

    def _freed(self, size: int, wide: int) -> None:
        self.live -= size
        self.wide_live -= wide

    def created(self, tensor: Any) -> None:
        size, wide = tensor_bytes(tensor)
        self.live += size
        self.wide_live += wide
        self.peak = max(self.peak, self.live)
        self.wide_peak = max(self.wide_peak, self.wide_live)
        weakref.finalize(tensor, self._freed, size, wide)
        if self.cap_bytes is not None and self.live > self.cap_bytes:
            raise MetaOverflow(self.live)

    def mode(self) -> Any:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        counter = self

        class _Counting(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                out = func(*args, **(kwargs or {}))
                given = {id(a) for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
                for tensor in tree_leaves(out):
                    # In-place results are their inputs and views share their base's storage.
                    if isinstance(tensor, torch.Tensor) and id(tensor) not in given and not tensor._is_view():
                        counter.created(tensor)
                return out

        return _Counting()


@dataclass(frozen=True)
class MetaRun:
    """The reference run on the meta device: its tensors (no data) and the footprint they add up to."""

    inputs: list[Any]
    outputs: Any
    model: Any
    footprint: Footprint


def run_on_meta(task: Task, shape: ShapeVariant, cap_bytes: int | None = None) -> MetaRun:
    """Build the model and inputs of `shape` on the meta device and run forward() there.

    Raises TaskError for mistakes of the task itself (bad_inputs, bad_init_inputs, ...) and MetaOverflow
    when forward()'s live tensors pass `cap_bytes`; any other exception means the meta device cannot run
    this reference (an op without a meta kernel, a value read with .item()), and the caller goes on
    without an estimate.
    """
    import torch

    module = load_reference_module(task.reference_source, shape.overrides)
    with torch.device("meta"):
        model, _ = build_model(module, shape, "meta")
        inputs = draw_inputs(module, shape, 0, "meta")
        counter = LiveBytes(cap_bytes)
        with torch.no_grad(), counter.mode():
            outputs = model(*inputs)
    tensors = [*model.parameters(), *model.buffers()]
    outs = list(outputs) if isinstance(outputs, tuple | list) else [outputs]
    sizes = {
        name: [tensor_bytes(t) for t in group]
        for name, group in (("inputs", inputs), ("parameters", tensors), ("outputs", outs))
    }
    footprint = Footprint(
        inputs_bytes=sum(s for s, _ in sizes["inputs"]),
        parameters_bytes=sum(s for s, _ in sizes["parameters"]),
        outputs_bytes=sum(s for s, _ in sizes["outputs"]),
        peak_bytes=counter.peak,
        wide_inputs_bytes=sum(w for _, w in sizes["inputs"]),
        wide_parameters_bytes=sum(w for _, w in sizes["parameters"]),
        wide_outputs_bytes=sum(w for _, w in sizes["outputs"]),
        wide_peak_bytes=counter.wide_peak,
    )
    return MetaRun(inputs=inputs, outputs=outputs, model=model, footprint=footprint)


def host_memory(limit_bytes: int, used_bytes: int, meminfo_text: str | None = None) -> DeviceMemory:
    """The host's memory for the child: MemAvailable, capped by its limit less what it already uses."""
    fields = host_meminfo() if meminfo_text is None else parse_meminfo(meminfo_text)
    total = fields.get("MemTotal", limit_bytes)
    system_available = fields.get("MemAvailable", fields.get("MemFree", total))
    under_limit = max(0, limit_bytes - used_bytes)
    if under_limit < system_available:
        source = f"the validation limit of {limit_bytes / GIB:.1f} GiB less {used_bytes / GIB:.1f} GiB in use"
        return DeviceMemory("cpu", under_limit, total, source)
    return DeviceMemory("cpu", system_available, total, "MemAvailable")


def gpu_memory(device: str) -> DeviceMemory:
    import torch

    free, total = torch.cuda.mem_get_info(torch.device(device))
    return DeviceMemory(device, int(free), int(total), "cudaMemGetInfo")


def estimate(footprint: Footprint, memory: DeviceMemory) -> MemoryEstimate:
    return MemoryEstimate(
        device=memory.device,
        inputs_bytes=footprint.inputs_bytes,
        parameters_bytes=footprint.parameters_bytes,
        outputs_bytes=footprint.outputs_bytes,
        intermediates_bytes=footprint.intermediates_bytes,
        need_bytes=footprint.need_bytes,
        wide_need_bytes=footprint.wide_need_bytes,
        available_bytes=memory.available_bytes,
        total_bytes=memory.total_bytes,
    )


def describe_need(footprint: Footprint) -> str:
    """`20.3 GiB (inputs 16.0 GiB, weights 0.0 GiB, outputs 4.0 GiB, temporaries 0.3 GiB)`."""
    return (
        f"{footprint.need_bytes / GIB:.2f} GiB (inputs {footprint.inputs_bytes / GIB:.2f} GiB, "
        f"weights {footprint.parameters_bytes / GIB:.2f} GiB, "
        f"outputs {footprint.outputs_bytes / GIB:.2f} GiB twice, "
        f"forward temporaries {footprint.intermediates_bytes / GIB:.2f} GiB)"
    )


def describe_free(memory: DeviceMemory) -> str:
    return (
        f"{memory.available_bytes / GIB:.2f} GiB free of {memory.total_bytes / GIB:.2f} GiB "
        f"on {memory.device} ({memory.source})"
    )
