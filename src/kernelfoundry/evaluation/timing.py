"""Timing calls on one device: warm-up, cache flush before every run, many timed runs, robust statistics.

CPU: time.perf_counter_ns around each call; before each run a buffer twice the last-level cache is
written so the call starts cold. CUDA: events recorded on the evaluation stream around each call, then a
device-wide torch.cuda.synchronize() before the next run; a second end event recorded after that
synchronize gives the `synced` time, which also counts work left on other streams (plus the sync's own
latency). Before each run a buffer twice the L2 size is written on the stream, then the stream sleeps
(backends/cuda.py LAUNCH_COVER_CYCLES) so the host's launch path is never inside the timed region. The
call receives the run
index so callers rotate input sets. Never decides correctness.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_LLC_BYTES = 32 * 1024 * 1024
Call = Callable[[int], Any]


@dataclass(frozen=True)
class Timings:
    """Per-run times in milliseconds; `synced_ms` only on CUDA."""

    runs_ms: tuple[float, ...]
    synced_ms: tuple[float, ...] = ()

    @property
    def median_ms(self) -> float:
        return statistics.median(self.runs_ms)

    @property
    def p25_ms(self) -> float:
        return quantile(self.runs_ms, 0.25)

    @property
    def p75_ms(self) -> float:
        return quantile(self.runs_ms, 0.75)

    @property
    def iqr_ms(self) -> float:
        return self.p75_ms - self.p25_ms

    @property
    def synced_median_ms(self) -> float | None:
        return statistics.median(self.synced_ms) if self.synced_ms else None


def quantile(values: tuple[float, ...] | list[float], q: float) -> float:
    """Linear-interpolated quantile of a non-empty sample."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def last_level_cache_bytes() -> int:
    """Largest CPU cache size the kernel reports (sysfs), or 32 MiB."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip()
        units = {"K": 1024, "M": 1024 * 1024}
        try:
            sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
        except (ValueError, IndexError):
            continue
    return max(sizes, default=DEFAULT_LLC_BYTES)


class CpuTimer:
    def __init__(self, flush: bool) -> None:
        import torch

        self._flush_buffer = (
            torch.empty(2 * last_level_cache_bytes() // 4, dtype=torch.float32) if flush else None
        )

    def flush(self) -> None:
        if self._flush_buffer is not None:
            self._flush_buffer.fill_(1.0)

    def measure(self, call: Call, runs: int, warmup: int) -> Timings:
        for i in range(warmup):
            call(i)
        times = []
        for i in range(runs):
            self.flush()
            start = time.perf_counter_ns()
            call(warmup + i)
            times.append((time.perf_counter_ns() - start) / 1e6)
        return Timings(tuple(times))


class CudaTimer:
    def __init__(self, device: Any, stream: Any, flush: bool) -> None:
        import torch

        self._torch = torch
        self._stream = stream
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 * 1024 * 1024)
        self._flush_buffer = torch.empty(2 * l2 // 4, dtype=torch.float32, device=device) if flush else None

    def flush(self) -> None:
        if self._flush_buffer is not None:
            with self._torch.cuda.stream(self._stream):
                self._flush_buffer.fill_(1.0)

    def measure(self, call: Call, runs: int, warmup: int) -> Timings:
        torch = self._torch
        with torch.cuda.stream(self._stream):
            for i in range(warmup):
                call(i)
            torch.cuda.synchronize()
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
            synced = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
            from kernelfoundry.evaluation.backends.cuda import cover_launch

            for i in range(runs):
                self.flush()
                cover_launch()
                starts[i].record(self._stream)
                call(warmup + i)
                ends[i].record(self._stream)
                torch.cuda.synchronize()
                synced[i].record(self._stream)
            torch.cuda.synchronize()
        return Timings(
            tuple(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)),
            tuple(s.elapsed_time(e) for s, e in zip(starts, synced, strict=True)),
        )
