"""The CUDA backend: units built by nvcc, device buffers owned by the runner, copies through staging.

Judge: its own stream; L2 flushed by writing a buffer twice the L2 size and synchronising (L2 is
shared by every context on the device). Runner: uploads inputs from the judge's staging memfds into its
own device buffers, times a call with events on its stream followed by a device-wide synchronise, and
copies outputs back into staging only when the judge asks (after the call, so it cannot know in advance).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from kernelfoundry.evaluation import reasons
from kernelfoundry.evaluation.backends.base import Backend, JudgeDevice, RunnerDevice
from kernelfoundry.evaluation.reasons import EvaluationFailure

KF_DEVICE_CUDA = 2


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

    def setup(self) -> None:
        import torch

        torch.cuda.init()
        torch.cuda.set_device(torch.device(self.device))
        self.stream = torch.cuda.Stream(device=torch.device(self.device))

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

    def place(self, host: Any) -> Any:
        placed = host.to(self.device, copy=True)
        self.synchronize()
        return placed

    def refresh(self, placed: Any, host: Any) -> None:
        placed.copy_(host)
        self.synchronize()

    def fetch(self, placed: Any, host: Any) -> None:
        host.copy_(placed)
        self.synchronize()

    def timed(self, call: Callable[[], Any]) -> tuple[Any, int]:
        import torch

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with self.on_stream():
            self.synchronize()
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
    judge_device=CudaJudgeDevice,
    runner_device=CudaRunnerDevice,
)
