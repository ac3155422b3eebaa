"""The screening rule: a short verified measurement first, the full timing protocol only where it can
matter. Pure.

A search evaluates many candidates that are far slower than the best it has: the full protocol
(KernelBench's 100 timed runs with cache flushes, the timing cross-check) spends device time on them that
decides nothing. The searcher names, per candidate, the kernel time it has to come near to matter
(`EvaluationSettings.screen_above_ms`: the elite of the candidate's archive cell; 0 for a candidate
landing in an empty cell, which always matters). The judge first times SCREEN_CALLS calls after
SCREEN_WARMUP warm-up calls, verified like any timed calls (fresh inputs before each, outputs checked
at random, at least three). When their median (summed over shapes) exceeds the time to beat by more
than the margin (`screen_margin`; the backend's by default: 0.3 on CUDA, where a screen of ten calls
strays far less than that from the full protocol's median, 1.0 on a CPU, whose medians drift with the
host's load), the candidate is reported with the screen's
figures and `screened: true`; otherwise it is timed in full as if there had been no screen. A
candidate gains nothing by looking slow, so a screened-out claim needs no cross-check; every claim
still passes the round-trip rule.
"""

from __future__ import annotations

SCREEN_CALLS = 10
SCREEN_WARMUP = 2


def needs_full_protocol(screen_ms: float, above_ms: float, margin: float) -> bool:
    """Whether a screen of `screen_ms` can matter against a time to beat of `above_ms` (0: always)."""
    if above_ms <= 0:
        return True
    return screen_ms <= above_ms * (1.0 + margin)
