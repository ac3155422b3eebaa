"""The CPU backend: C++/OpenMP units through g++, inputs and outputs in shared memory.

Judge: caches flushed by writing a buffer twice the last-level cache (the cache is shared by both
processes, so the judge's flush evicts what the runner would have reused). Runner: maps the judge's
memfd buffers in place (inputs read-only), times a call with perf_counter_ns.
"""

from __future__ import annotations

import contextlib
import platform
import time
from collections.abc import Callable
from typing import Any

from kernelfoundry.evaluation.backends.base import Backend, JudgeDevice, RunnerDevice

KF_DEVICE_CPU = 1


def cpu_name() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


class CpuJudgeDevice(JudgeDevice):
    def __init__(self, device: str, flush: bool) -> None:
        super().__init__(device, flush)
        self._timer: Any = None

    def baseline_timer(self) -> Any:
        if self._timer is None:
            from kernelfoundry.evaluation.timing import CpuTimer

            self._timer = CpuTimer(self.flush_enabled)
        return self._timer

    def flush_cache(self) -> None:
        self.baseline_timer().flush()

    def name(self) -> str:
        return cpu_name()


class CpuRunnerDevice(RunnerDevice):
    def timed(self, call: Callable[[], Any]) -> tuple[Any, int]:
        start = time.perf_counter_ns()
        result = call()
        return result, time.perf_counter_ns() - start


CPU = Backend(
    name="cpu",
    device_kind="cpu",
    language="cpp",
    file_suffix=".cpp",
    abi_device=KF_DEVICE_CPU,
    memory="shared",
    default_timed_runs=30,
    compile_baseline_by_default=False,
    runner_flags=(),
    call_overhead_allowance_ns=10_000,
    judge_device=CpuJudgeDevice,
    runner_device=CpuRunnerDevice,
)
