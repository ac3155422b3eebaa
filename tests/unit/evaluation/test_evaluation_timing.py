"""Timing statistics and the CPU timer's protocol (run indices rotate input sets, flush between runs)."""

from __future__ import annotations

import pytest

from kernelfoundry.evaluation.timing import CpuTimer, Timings, last_level_cache_bytes, quantile


def test_quantiles_interpolate() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.25) == pytest.approx(1.75)
    assert quantile([7.0], 0.75) == 7.0


def test_timings_report_median_and_interquartile_range() -> None:
    timings = Timings((1.0, 2.0, 3.0, 4.0, 100.0))
    assert timings.median_ms == 3.0
    assert timings.iqr_ms == 2.0
    assert timings.synced_median_ms is None


def test_cpu_timer_calls_warmup_then_timed_runs_with_increasing_indices() -> None:
    seen: list[int] = []
    timings = CpuTimer(flush=False).measure(seen.append, runs=4, warmup=2)
    assert seen == [0, 1, 2, 3, 4, 5]
    assert len(timings.runs_ms) == 4 and all(t >= 0 for t in timings.runs_ms)


def test_cpu_flush_buffer_exceeds_the_last_level_cache() -> None:
    timer = CpuTimer(flush=True)
    assert timer._flush_buffer is not None
    assert timer._flush_buffer.numel() * 4 >= 2 * last_level_cache_bytes()
