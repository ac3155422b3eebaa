"""device_share.py: device memory the judge lends the runner by file descriptor. Without a driver the
CUDA judge lends nothing (the host path stays); with a GPU (gpu marker) memory lent and borrowed
through a descriptor is one memory, and a view past its end is refused."""

from __future__ import annotations

import ctypes

import pytest

from kernelfoundry.evaluation import device_share
from kernelfoundry.evaluation.backends.cuda import CudaJudgeDevice
from kernelfoundry.evaluation.shared_memory import TensorSpec


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_a_view_past_the_end_of_the_lent_memory_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds the lent memory"):
        device_share._tensor(1 << 40, 4096, TensorSpec("float32", (1025,), 0))
    with pytest.raises(ValueError, match="exceeds the lent memory"):
        device_share._tensor(1 << 40, 4096, TensorSpec("float32", (4,), -64))


def test_without_a_driver_the_cuda_judge_lends_nothing() -> None:
    if _driver_present():
        pytest.skip("this host has a CUDA driver")
    assert CudaJudgeDevice("cuda:0", flush=False).lend(1 << 20) is None


@pytest.mark.gpu
def test_memory_lent_and_borrowed_by_descriptor_is_one_memory() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    device = torch.cuda.current_device()
    lent = device_share.LentMemory.create(3 * 1000 * 4, device)
    borrowed = device_share.BorrowedMemory.open(lent.fd, lent.size, device)
    try:
        spec = TensorSpec("float32", (3, 1000), 0)
        borrowed.tensor(spec).copy_(torch.arange(3000, dtype=torch.float32, device="cuda").view(3, 1000))
        torch.cuda.synchronize()
        assert torch.equal(lent.tensor(spec).cpu(), torch.arange(3000, dtype=torch.float32).view(3, 1000))
        bf16 = lent.tensor(TensorSpec("bfloat16", (8,), 64))
        assert bf16.dtype == torch.bfloat16 and bf16.shape == (8,)
    finally:
        borrowed.close()
        lent.close()
    assert lent.closed and borrowed.closed
