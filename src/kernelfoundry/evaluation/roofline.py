"""The roofline floor of a task's shape on the judge's device, and how near a candidate comes to it.

The floor is the time no kernel can beat: max(bytes moved / memory bandwidth, FLOPs / float32 peak),
with the bytes of every input, parameter, buffer and output (each read or written once) and the FLOPs
torch's FlopCounterMode counts in one eager forward. The device's bandwidth (a large copy) and peak (a
large float32 matmul) are measured once per judge process, where no candidate ever runs. A report's
`roofline_fraction` is floor / the candidate's time: 1.0 is the floor, memory-bound kernels reach 0.8 and
more on a quiet GPU. On a shared CPU both measurements drift with the load: an indication there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

COPY_ELEMENTS = {"cuda": 1 << 28, "cpu": 1 << 24}
MATMUL_SIZE = {"cuda": 8192, "cpu": 1024}
REPEATS = 5


@dataclass(frozen=True)
class DeviceLimits:
    bandwidth_bytes_per_s: float
    peak_flops: float


@dataclass(frozen=True)
class Traffic:
    bytes_moved: float
    flops: float

    def floor_ms(self, limits: DeviceLimits) -> float:
        return 1e3 * max(self.bytes_moved / limits.bandwidth_bytes_per_s, self.flops / limits.peak_flops)

    def bound(self, limits: DeviceLimits) -> str:
        memory = self.bytes_moved / limits.bandwidth_bytes_per_s
        return "memory" if memory >= self.flops / limits.peak_flops else "compute"


_limits: dict[str, DeviceLimits] = {}


def device_limits(device: str, synchronize: Any) -> DeviceLimits:
    """The device's copy bandwidth and float32 matmul peak, measured on first use (best of REPEATS)."""
    if device not in _limits:
        _limits[device] = _measure(device, synchronize)
        if device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()  # the runners need the memory more than the judge's allocator
    return _limits[device]


def _measure(device: str, synchronize: Any) -> DeviceLimits:
    import torch

    kind = "cuda" if device.startswith("cuda") else "cpu"
    source = torch.empty(COPY_ELEMENTS[kind], dtype=torch.float32, device=device).normal_()
    target = torch.empty_like(source)
    m = MATMUL_SIZE[kind]
    a = torch.randn(m, m, device=device)
    b = torch.randn(m, m, device=device)

    def best(call: Any) -> float:
        call()
        synchronize()
        times = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            call()
            synchronize()
            times.append(time.perf_counter() - started)
        return min(times)

    copy_s = best(lambda: target.copy_(source))
    matmul_s = best(lambda: torch.mm(a, b))
    return DeviceLimits(2 * 4 * source.numel() / copy_s, 2 * m**3 / matmul_s)


def count_flops(forward: Any) -> tuple[Any, float]:
    """`forward()`'s result and the FLOPs torch counts in it."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        result = forward()
    return result, float(counter.get_total_flops())


def bytes_of(tensors: list[Any]) -> float:
    return float(sum(t.numel() * t.element_size() for t in tensors))
