"""A run's speedup: the one definition that every figure (progress, summary, lineage, metrics) uses.

The fastest kernel is chosen by its own median time, not by the largest per-evaluation ratio of a noisy
eager timing to a kernel time: one slow eager measurement must not crown a kernel that was not the
fastest. The eager baseline is robust: every evaluation of the run times eager beside its candidate, and
those medians are pooled; the run's eager time is the median of the pool, its spread the pool's
interquartile range, and samples beyond Tukey's fences (1.5 IQR outside the quartiles) are listed as
outliers so that they stay visible without moving the figure.

Before a run ends, its fastest kernel is evaluated once more (a *re-time*, candidate id
`<candidate>-retime-<token>`) with eager (and torch.compile when the executor measures it) timed in the
same process, side by side. The reported figure is then

    speedup = median(eager pool, the re-time's eager included) / the re-timed kernel's median

and the side-by-side ratio of the re-time alone is reported beside it. Without a re-time (a run
cancelled first, a re-time that failed) the kernel's own median from its evaluation is used.

Pure logic: no I/O, no protobuf; callers map their records onto `Measurement`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RETIME_MARKER = "-retime-"
TUKEY_FENCE = 1.5


@dataclass(frozen=True)
class Measurement:
    """One evaluation's timings in milliseconds (0 or None: not measured)."""

    candidate_id: str
    correct: bool
    runtime_ms: float | None = None
    runtime_spread_ms: float | None = None
    baseline_ms: float | None = None
    compile_baseline_ms: float | None = None


@dataclass(frozen=True)
class PooledBaseline:
    """Eager (or torch.compile) medians of many evaluations, pooled."""

    median_ms: float
    spread_ms: float
    samples: int
    outliers_ms: tuple[float, ...] = ()


@dataclass(frozen=True)
class RunSpeedup:
    """The run's figure and everything it was computed from."""

    candidate_id: str
    speedup: float
    kernel_ms: float
    kernel_spread_ms: float
    eager: PooledBaseline
    retimed: bool = False
    side_by_side_eager_ms: float = 0.0
    side_by_side_speedup: float = 0.0
    compile_ms: float = 0.0
    speedup_vs_compile: float = 0.0


def retime_id(candidate_id: str, token: str) -> str:
    """The candidate id of a re-time of `candidate_id` (token: unique per attempt)."""
    return f"{candidate_id}{RETIME_MARKER}{token}"


def retimed_candidate(candidate_id: str) -> str | None:
    """The candidate a re-time id re-times, or None when `candidate_id` is not a re-time."""
    head, marker, _ = candidate_id.rpartition(RETIME_MARKER)
    return head if marker and head else None


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def pool_baseline(samples_ms: Iterable[float | None]) -> PooledBaseline | None:
    """Median, interquartile range and Tukey outliers of the measured (positive) samples; None if none."""
    values = sorted(v for v in samples_ms if v is not None and v > 0)
    if not values:
        return None
    q1, q3 = _quartiles(values)
    spread = q3 - q1
    low, high = q1 - TUKEY_FENCE * spread, q3 + TUKEY_FENCE * spread
    outliers = tuple(v for v in values if v < low or v > high)
    return PooledBaseline(statistics.median(values), spread, len(values), outliers)


def _timed(m: Measurement) -> bool:
    return m.correct and m.runtime_ms is not None and m.runtime_ms > 0


def fastest(measurements: Iterable[Measurement]) -> Measurement | None:
    """The correct, timed evaluation (re-times excluded) with the lowest median; ties: spread, then id."""
    candidates = [m for m in measurements if _timed(m) and retimed_candidate(m.candidate_id) is None]
    return min(
        candidates,
        key=lambda m: (m.runtime_ms, m.runtime_spread_ms or 0.0, m.candidate_id),
        default=None,
    )


def run_speedup(measurements: Sequence[Measurement]) -> RunSpeedup | None:
    """The run's speedup by the one definition (module docstring); None without a correct timed kernel
    or without any eager measurement."""
    best = fastest(measurements)
    eager = pool_baseline(m.baseline_ms for m in measurements)
    if best is None or eager is None:
        return None
    retimes = [
        m for m in measurements if _timed(m) and retimed_candidate(m.candidate_id) == best.candidate_id
    ]
    retime = retimes[-1] if retimes else None
    measured = retime or best
    kernel_ms = float(measured.runtime_ms or 0.0)
    compile_ms = measured.compile_baseline_ms or 0.0
    side_eager = (retime.baseline_ms or 0.0) if retime else 0.0
    return RunSpeedup(
        candidate_id=best.candidate_id,
        speedup=eager.median_ms / kernel_ms,
        kernel_ms=kernel_ms,
        kernel_spread_ms=measured.runtime_spread_ms or 0.0,
        eager=eager,
        retimed=retime is not None,
        side_by_side_eager_ms=side_eager,
        side_by_side_speedup=side_eager / kernel_ms if side_eager else 0.0,
        compile_ms=compile_ms,
        speedup_vs_compile=compile_ms / kernel_ms if compile_ms else 0.0,
    )


def kernel_speedup(runtime_ms: float | None, eager: PooledBaseline | None) -> float | None:
    """One kernel's speedup over the run's pooled eager baseline (what the archive ranks by)."""
    if runtime_ms is None or runtime_ms <= 0 or eager is None:
        return None
    return eager.median_ms / runtime_ms
