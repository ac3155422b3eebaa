"""What a backend is (`Backend`) and the two strategies each backend implements.

`JudgeDevice` runs in the trusted judge: it computes references and baselines and never sees candidate
code. `RunnerDevice` runs in the untrusted runner: it holds the candidate's view of inputs and outputs.
Memory strategies: "shared" (the runner maps the judge's memfd buffers directly; inputs read-only) and
"staged" (the runner owns device buffers and copies through host staging memfds on the judge's request).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

MemoryStrategy = Literal["shared", "staged"]


@dataclass(frozen=True)
class Backend:
    """Facts about one backend; the strategies are built by the two factories."""

    name: str  # "cpu", "cuda": the backend of requests, subjects and build targets
    device_kind: str  # torch's device type
    language: str  # KernelSource.language
    file_suffix: str
    abi_device: int  # kf_device_type (DLPack's code)
    memory: MemoryStrategy
    default_timed_runs: int
    compile_baseline_by_default: bool
    runner_flags: tuple[str, ...]
    # Host time per call that a runner's claim does not cover (loop, launch) but the judge's batch
    # estimate does: the absolute slack of the timing cross-check (verification.cross_check).
    call_overhead_allowance_ns: int
    judge_device: Callable[[str, bool], JudgeDevice]  # (device, flush) -> strategy
    runner_device: Callable[[str], RunnerDevice]
    # How long the eager and torch.compile timings of a task's shape may be reused by the next
    # candidates before they are timed again (a drift check); 0: timed beside every candidate.
    baseline_reuse_s: float = 0.0
    # How far above the time to beat a screen may come and still get the full protocol (screening.py):
    # wide where the device's own noise is (a shared CPU), narrow where it is not.
    screen_margin: float = 1.0
    # Runners the judge keeps started ahead, and whether their start may run beside a candidate's timed
    # calls. A runner's start (torch imported, device initialised) takes 4-5 s on the H200 host, longer
    # than a GPU candidate's whole evaluation: started one at a time and waited for before timing, it
    # was half of every GPU evaluation. A GPU's timed calls are measured on the device, on a host with
    # cores to spare; a CPU kernel's time is the host's cores, which a start would take.
    runners_ahead: int = 1
    start_runners_beside_timing: bool = False


class JudgeDevice:
    """The judge's side of a device. Defaults are the host's (no stream, nothing to synchronise)."""

    def __init__(self, device: str, flush: bool) -> None:
        self.device = device
        self.flush_enabled = flush
        self.stream: Any = None

    def setup(self) -> None:
        """Make the device current (raises EvaluationFailure(bad_request) when it is absent)."""

    @contextlib.contextmanager
    def on_stream(self) -> Iterator[None]:
        yield

    def synchronize(self) -> None:
        """Wait until every piece of work queued on the device is done."""

    def flush_cache(self) -> None:
        """Evict the caches a timed call could profit from (CPU last level, GPU L2)."""

    def baseline_timer(self) -> Any:
        """The timer for eager / torch.compile baselines (kernelfoundry.evaluation.timing)."""
        raise NotImplementedError

    def name(self) -> str:
        raise NotImplementedError

    def health(self) -> BaseException | None:
        """None while the device context works; the exception that shows it broken otherwise."""
        return None

    def pin(self, address: int, size: int) -> bool:
        """Page-lock host memory that staged copies go through (faster transfers); False: not pinned."""
        return False

    def free_memory_bytes(self) -> int | None:
        """Memory free for the evaluation's input sets (the host's MemAvailable; None: unknown)."""
        from kernelfoundry.stack.hardware import host_meminfo

        return host_meminfo().get("MemAvailable")

    def release_memory(self) -> None:
        """Give memory the evaluation no longer uses back to the device (other processes need it)."""

    @contextlib.contextmanager
    def working_memory(self) -> Iterator[list[int]]:
        """Measures the block's temporaries: the bytes allocated at its peak beyond what it started with
        and what is still allocated after it (its results), appended to the yielded list when known."""
        yield []

    def unpin(self, address: int) -> None:
        """Undo `pin` (before the memory is unmapped)."""

    def lend(self, nbytes: int) -> Any:
        """Device memory of at least `nbytes` the runner can map from a file descriptor, so a staged
        fetch stays inside the device (device_share.LentMemory); None where the device cannot lend."""
        return None


class RunnerDevice:
    """The runner's side of a device: places inputs and outputs, times one call."""

    def __init__(self, device: str) -> None:
        self.device = device

    def setup(self) -> None:
        """Initialise the device before the candidate arrives (off the hot path)."""

    def stream_handle(self) -> int | None:
        """The `stream` argument of entry points (NULL on the host)."""
        return None

    @contextlib.contextmanager
    def on_stream(self) -> Iterator[None]:
        yield

    def synchronize(self) -> None:
        """Wait for every piece of work on the device."""

    def release_memory(self) -> None:
        """Hand what the runner freed back to the driver (the judge beside it allocates on the same
        device); nothing to do on the host."""

    def place(self, host: Any) -> Any:
        """The tensor the candidate computes on for a judge-provided host tensor (shared: itself)."""
        return host

    def blank(self, host: Any) -> Any:
        """A tensor like `host` where the candidate computes, its contents undefined (an output)."""
        return self.place(host)

    def refresh(self, placed: Any, host: Any) -> None:
        """Bring new values of `host` into `placed` (staged memory only)."""

    def fetch(self, placed: Any, host: Any) -> None:
        """Copy `placed` into the judge-readable `host` tensor (staged memory only)."""

    def pin(self, address: int, size: int, read_only: bool = False) -> bool:
        """Page-lock mapped host memory that staged copies go through; False: not pinned."""
        return False

    def borrow(self, fd: int, size: int) -> Any:
        """Map the judge's lent memory behind `fd` (device_share.BorrowedMemory); ShareError where
        this device cannot."""
        from kernelfoundry.evaluation.device_share import ShareError

        raise ShareError(f"the {self.device} device borrows no memory")

    def timed(self, call: Callable[[], Any]) -> tuple[Any, int]:
        """Run `call` and return (its result, the claimed duration in ns, device work included)."""
        raise NotImplementedError
