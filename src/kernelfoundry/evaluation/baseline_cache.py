"""Eager and torch.compile timings of a task's shape, reused by the next candidates for a while.

The baselines belong to the task, its shape and the device, not to a candidate: timing them beside
every candidate doubled the device time of an evaluation. The judge keeps them here (it is
long-lived, and no candidate ever runs in it) and times them again once they are older than the
settings allow (the drift check); every report says how old its baselines are. Keyed by everything
the timing depends on: the task source, the shape, the device and the timing protocol. Bounded
(least recently used first out).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

MAX_ENTRIES = 64


@dataclass(frozen=True)
class TimedBaselines:
    eager_ms: float
    compile_ms: float | None
    compile_note: str  # why torch.compile has no figure ("" when it has one or was not asked)
    measured_at: float  # time.monotonic() of the measurement


_cache: OrderedDict[str, TimedBaselines] = OrderedDict()


def cache_key(*parts: object) -> str:
    return hashlib.sha256("\0".join(repr(p) for p in parts).encode()).hexdigest()


def fresh(key: str, max_age_s: float, now: float) -> TimedBaselines | None:
    """The baselines of `key` if they were measured at most `max_age_s` ago."""
    held = _cache.get(key)
    if held is None or max_age_s <= 0 or now - held.measured_at > max_age_s:
        return None
    _cache.move_to_end(key)
    return held


def remember(key: str, baselines: TimedBaselines) -> None:
    _cache[key] = baselines
    _cache.move_to_end(key)
    while len(_cache) > MAX_ENTRIES:
        _cache.popitem(last=False)


def clear() -> None:
    _cache.clear()
