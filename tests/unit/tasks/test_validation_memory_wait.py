"""Validation on a shared GPU: a shape that fits the device waits for memory others hold for a while,
and an allocation that failed on it is tried again; only what the device can never hold is refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernelfoundry.tasks import validation_child
from kernelfoundry.tasks.memory import GIB, DeviceMemory
from kernelfoundry.tasks.model import TaskError

TOTAL = 140 * GIB


class FakeGpu:
    """Free memory that follows a script (GiB), one reading per poll; the last value stays."""

    def __init__(self, free_gib: list[float]) -> None:
        self.free = free_gib
        self.readings = 0

    def memory(self, device: str, limit_bytes: int) -> DeviceMemory:
        value = self.free[min(self.readings, len(self.free) - 1)]
        self.readings += 1
        return DeviceMemory(device, int(value * GIB), TOTAL, "cudaMemGetInfo")


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(validation_child.time, "sleep", lambda _s: None)
    yield


def use(monkeypatch: pytest.MonkeyPatch, gpu: FakeGpu) -> None:
    monkeypatch.setattr(validation_child, "_device_memory", gpu.memory)


def test_a_shape_that_fits_the_gpu_waits_until_others_free_its_memory(
    monkeypatch: pytest.MonkeyPatch, no_sleep: None
) -> None:
    gpu = FakeGpu([1.0, 2.0, 30.0])
    use(monkeypatch, gpu)
    said: list[str] = []
    free = validation_child._wait_for_memory("cuda:0", 0, 20 * GIB, said.append)
    assert free.available_bytes == 30 * GIB and gpu.readings == 3
    assert said and "waiting for 20.00 GiB on cuda:0" in said[0]


def test_the_wait_ends_at_its_limit_and_what_never_fits_is_not_waited_for(
    monkeypatch: pytest.MonkeyPatch, no_sleep: None
) -> None:
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(validation_child.time, "monotonic", lambda: float(next(clock)))
    gpu = FakeGpu([1.0])
    use(monkeypatch, gpu)
    free = validation_child._wait_for_memory("cuda:0", 0, 20 * GIB, lambda _m: None, wait_s=100.0)
    assert free.available_bytes == 1 * GIB and 5 <= gpu.readings <= 12
    beyond = FakeGpu([1.0])
    use(monkeypatch, beyond)
    validation_child._wait_for_memory("cuda:0", 0, 200 * GIB, lambda _m: None)
    assert beyond.readings == 1  # more than the device has: answered at once, the caller refuses
    host = FakeGpu([1.0])
    use(monkeypatch, host)
    validation_child._wait_for_memory("cpu", 0, 20 * GIB, lambda _m: None)
    assert host.readings == 1  # the host's memory is not waited for


def test_an_allocation_that_failed_on_memory_is_tried_again_once_it_is_free(
    monkeypatch: pytest.MonkeyPatch, no_sleep: None
) -> None:
    use(monkeypatch, FakeGpu([50.0]))
    attempts = []

    def step() -> str:
        attempts.append(1)
        if len(attempts) < 2:
            raise TaskError("bad_inputs", "get_inputs() raised OutOfMemoryError: CUDA out of memory.")
        return "drawn"

    said: list[str] = []
    assert validation_child._retrying_on_memory(step, "cuda:0", 0, 8 * GIB, said.append) == "drawn"
    assert len(attempts) == 2 and "trying again" in said[0]


def test_other_errors_and_the_last_attempt_are_raised(
    monkeypatch: pytest.MonkeyPatch, no_sleep: None
) -> None:
    use(monkeypatch, FakeGpu([50.0]))

    def wrong() -> None:
        raise TaskError("reference_error", "forward() raised ValueError: bad")

    with pytest.raises(TaskError, match="ValueError"):
        validation_child._retrying_on_memory(wrong, "cuda:0", 0, GIB, lambda _m: None)
    calls = []

    def always_short() -> None:
        calls.append(1)
        raise TaskError("resource_limit", "forward() ran out of memory on cuda:0")

    with pytest.raises(TaskError, match="out of memory"):
        validation_child._retrying_on_memory(always_short, "cuda:0", 0, GIB, lambda _m: None)
    assert len(calls) == validation_child.MEMORY_RETRIES + 1


def test_timing_the_reference_is_tried_again_when_it_ran_out_of_memory(
    monkeypatch: pytest.MonkeyPatch, no_sleep: None
) -> None:
    """Timing forward() allocates too (a level-1 task on a shared H200 died there, read as the task's
    reference_error): a memory failure while timing is resource_limit and tried again once it is free."""
    import torch

    from kernelfoundry.tasks.model import ShapeVariant

    use(monkeypatch, FakeGpu([50.0]))
    calls: list[int] = []

    class ShortOnce(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            if len(calls) == 1:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
            return x * 2

    shape = ShapeVariant("default")
    timing = lambda: validation_child._timed_forward(ShortOnce(), [torch.ones(4)], shape, "cpu")  # noqa: E731
    with pytest.raises(TaskError, match="timing forward\\(\\) ran out of memory") as short:
        timing()
    assert short.value.reason == "resource_limit"
    calls.clear()
    said: list[str] = []
    assert validation_child._retrying_on_memory(timing, "cuda:0", 0, GIB, said.append) >= 0.0
    assert len(calls) > 1 and "trying again" in said[0]

    class Broken(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("a bug in the task")

    with pytest.raises(TaskError, match="timing forward\\(\\) raised ValueError") as broken:
        validation_child._timed_forward(Broken(), [torch.ones(4)], shape, "cpu")
    assert broken.value.reason == "reference_error"
