"""The roofline floor: bytes and FLOPs of a forward, the device's limits, the larger term."""

from __future__ import annotations

import pytest

from kernelfoundry.evaluation import roofline
from kernelfoundry.evaluation.roofline import DeviceLimits, Traffic

torch = pytest.importorskip("torch")


def test_the_floor_is_the_larger_of_the_memory_and_the_compute_term() -> None:
    limits = DeviceLimits(bandwidth_bytes_per_s=1e9, peak_flops=1e12)
    memory = Traffic(bytes_moved=2e6, flops=1e6)  # 2 ms of bytes, 1 us of FLOPs
    compute = Traffic(bytes_moved=1e3, flops=5e9)  # 1 us of bytes, 5 ms of FLOPs
    assert memory.floor_ms(limits) == pytest.approx(2.0) and memory.bound(limits) == "memory"
    assert compute.floor_ms(limits) == pytest.approx(5.0) and compute.bound(limits) == "compute"


def test_flops_of_a_matmul_and_bytes_of_its_tensors_are_counted() -> None:
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    result, flops = roofline.count_flops(lambda: a @ b)
    assert flops == 2 * 64 * 32 * 16
    assert roofline.bytes_of([a, b, result]) == 4 * (64 * 32 + 32 * 16 + 64 * 16)


def test_the_cpu_limits_are_measured_once_and_plausible() -> None:
    first = roofline.device_limits("cpu", lambda: None)
    assert first is roofline.device_limits("cpu", lambda: None)
    assert 1e8 < first.bandwidth_bytes_per_s < 1e13 and 1e8 < first.peak_flops < 1e15
