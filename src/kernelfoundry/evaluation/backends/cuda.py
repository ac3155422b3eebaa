"""The CUDA backend: units built by nvcc, device buffers owned by the runner, copies through staging.

Judge: its own stream; L2 flushed by writing a buffer twice the L2 size and synchronising (L2 is
shared by every context on the device). Runner: uploads inputs from the judge's staging memfds into its
own device buffers, times a call with events on its stream followed by a device-wide synchronise, and
copies outputs back into staging only when the judge asks (after the call, so it cannot know in advance).

Both sides time by one protocol (timing.CudaTimer's): a buffer twice the L2 size is written on the stream
right before the start event, then the call, then the end event and a device-wide synchronise. The write
keeps the GPU busy while the host prepares the call, so neither eager nor a candidate is charged the
host's launch latency on an idle GPU; a runner that timed from an idle stream measured a 0.14 ms kernel
at 0.20 ms on the H200 (level1_gelu), while eager's figure, timed after such a write, was not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from kernelfoundry.evaluation import reasons
from kernelfoundry.evaluation.backends.base import Backend, JudgeDevice, RunnerDevice
from kernelfoundry.evaluation.reasons import EvaluationFailure

KF_DEVICE_CUDA = 2


CUDA_HOST_REGISTER_READ_ONLY = 0x08
# Before each timed call the stream sleeps this many GPU clock cycles (about 0.2 ms on an H200): the
# host enqueues the start event and the call meanwhile, so the timed region holds the call's device
# work only, never the host's launch path (which differs between the judge's eager and a runner's unit).
LAUNCH_COVER_CYCLES = 400_000


def cover_launch() -> None:
    """Enqueue the launch cover on the current stream."""
    import torch

    torch.cuda._sleep(LAUNCH_COVER_CYCLES)


def pin_host(address: int, size: int, read_only: bool = False) -> bool:
    """cudaHostRegister a mapped range (a memfd arena): staged copies then run at full link speed."""
    import torch

    flags = CUDA_HOST_REGISTER_READ_ONLY if read_only else 0
    try:
        return int(torch.cuda.cudart().cudaHostRegister(address, size, flags)) == 0
    except Exception:
        return False


def unpin_host(address: int) -> None:
    import torch

    with contextlib.suppress(Exception):
        torch.cuda.cudart().cudaHostUnregister(address)


class CudaJudgeDevice(JudgeDevice):
    def __init__(self, device: str, flush: bool) -> None:
        super().__init__(device, flush)
        self._timer: Any = None

    def setup(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise EvaluationFailure(reasons.BAD_REQUEST, f"device {self.device} requested but CUDA is absent")
        torch.cuda.set_device(torch.device(self.device))
        self.stream = torch.cuda.Stream(device=torch.device(self.device))

    @contextlib.contextmanager
    def on_stream(self) -> Iterator[None]:
        import torch

        with torch.cuda.stream(self.stream):
            yield

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def free_memory_bytes(self) -> int | None:
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(self.device))
        return int(free)

    @contextlib.contextmanager
    def working_memory(self) -> Iterator[list[int]]:
        import torch

        device = torch.device(self.device)
        measured: list[int] = []
        self.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        yield measured
        self.synchronize()
        after = torch.cuda.memory_allocated(device)
        measured.append(max(0, torch.cuda.max_memory_allocated(device) - max(before, after)))

    def release_memory(self) -> None:
        """The caching allocator keeps what an evaluation freed; the runners, the next evaluation's
        draws and a validation beside this judge need it from the driver."""
        import gc

        import torch

        gc.collect()  # tensors a reference cycle still holds are freed first
        torch.cuda.empty_cache()

    def baseline_timer(self) -> Any:
        if self._timer is None:
            import torch

            from kernelfoundry.evaluation.timing import CudaTimer

            self._timer = CudaTimer(torch.device(self.device), self.stream, self.flush_enabled)
        return self._timer

    def flush_cache(self) -> None:
        self.baseline_timer().flush()
        self.synchronize()

    def name(self) -> str:
        import torch

        with contextlib.suppress(Exception):
            return str(torch.cuda.get_device_name(torch.device(self.device)))
        return self.device

    def pin(self, address: int, size: int) -> bool:
        return pin_host(address, size)

    def unpin(self, address: int) -> None:
        unpin_host(address)

    def lend(self, nbytes: int) -> Any:
        import torch

        from kernelfoundry.evaluation.device_share import LentMemory, ShareError

        if not torch.cuda.is_available():
            return None
        try:
            return LentMemory.create(nbytes, torch.cuda.current_device())
        except (ShareError, OSError, AttributeError):  # AttributeError: a libcuda without the calls
            return None

    def health(self) -> BaseException | None:
        import torch

        try:
            torch.cuda.synchronize()
            torch.zeros(1, device=self.device).add_(1).item()
        except Exception as exc:
            return exc
        return None


class CudaRunnerDevice(RunnerDevice):
    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.stream: Any = None
        self._lead: Any = None  # written before each timed call, as CudaTimer's flush buffer

    def setup(self) -> None:
        import torch

        torch.cuda.init()
        torch.cuda.set_device(torch.device(self.device))
        self.stream = torch.cuda.Stream(device=torch.device(self.device))
        properties = torch.cuda.get_device_properties(torch.device(self.device))
        l2 = int(getattr(properties, "L2_cache_size", 0) or 64 * 1024 * 1024)
        self._lead = torch.empty(2 * l2 // 4, dtype=torch.float32, device=torch.device(self.device))
        self._warm_libraries()

    def _warm_libraries(self) -> None:
        """cuBLAS and cuDNN set up before any candidate arrives (the judge starts a runner ahead of its
        candidate): their first use in a process loads the libraries and creates the handles, which a
        glue's first trial call (a torch matmul or conv beside the generated kernels) would otherwise pay
        inside the trials. Best effort: a library that cannot start now fails the candidate's own call
        later, with its own message."""
        import torch

        device = torch.device(self.device)
        with contextlib.suppress(Exception):  # best effort (see the docstring)
            with torch.cuda.stream(self.stream), torch.no_grad():
                square = torch.ones(16, 16, device=device)
                torch.mm(square, square)
                image, filters = torch.ones(1, 4, 8, 8, device=device), torch.ones(4, 4, 3, 3, device=device)
                torch.nn.functional.conv2d(image, filters, padding=1)
            torch.cuda.synchronize()

    def stream_handle(self) -> int | None:
        import torch

        return int(torch.cuda.current_stream().cuda_stream)

    @contextlib.contextmanager
    def on_stream(self) -> Iterator[None]:
        import torch

        with torch.cuda.stream(self.stream):
            yield

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def release_memory(self) -> None:
        """The caching allocator's free blocks (a refresh's fresh draw, a digest's temporaries) back to
        the driver, for the judge's references on the same device."""
        import torch

        torch.cuda.empty_cache()

    def place(self, host: Any) -> Any:
        placed = host.to(self.device, copy=True)
        self.synchronize()
        return placed

    def blank(self, host: Any) -> Any:
        import torch

        return torch.empty(host.shape, dtype=host.dtype, device=self.device)

    def refresh(self, placed: Any, host: Any) -> None:
        placed.copy_(host)
        self.synchronize()

    def fetch(self, placed: Any, host: Any) -> None:
        host.copy_(placed)
        self.synchronize()

    def pin(self, address: int, size: int, read_only: bool = False) -> bool:
        return pin_host(address, size, read_only)

    def borrow(self, fd: int, size: int) -> Any:
        import torch

        from kernelfoundry.evaluation.device_share import BorrowedMemory

        return BorrowedMemory.open(fd, size, torch.cuda.current_device())

    def timed(self, call: Callable[[], Any]) -> tuple[Any, int]:
        import torch

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with self.on_stream():
            self.synchronize()
            if self._lead is not None:
                self._lead.fill_(1.0)
            cover_launch()
            start.record(self.stream)
            result = call()
            end.record(self.stream)
        # Work left on other streams is waited for here; it shows in the judge's wall clock.
        self.synchronize()
        return result, int(start.elapsed_time(end) * 1e6)


CUDA = Backend(
    name="cuda",
    device_kind="cuda",
    language="cuda",
    file_suffix=".cu",
    abi_device=KF_DEVICE_CUDA,
    memory="staged",
    default_timed_runs=100,
    compile_baseline_by_default=True,
    runner_flags=("--cuda",),
    call_overhead_allowance_ns=30_000,
    baseline_reuse_s=300.0,
    screen_margin=0.3,
    runners_ahead=3,
    start_runners_beside_timing=True,
    judge_device=CudaJudgeDevice,
    runner_device=CudaRunnerDevice,
)
