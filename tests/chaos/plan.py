"""The kill schedule of a chaos round: which process dies when, and for how long it stays down.

Pure and seeded, so a failing round can be replayed exactly. Targets are taken in shuffled rounds (every
target is killed once before any is killed again), so even a short schedule reaches the broker and every
service. Kills never overlap: a target is restarted before the next kill, which is what "kill at random
moments and restart each" means for a supervisor that restarts one process at a time.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

BROKER = "nats"


@dataclass(frozen=True)
class Kill:
    """SIGKILL `target` (a service name, or `nats` for the broker) at `at_s`, restart it `down_s` later."""

    at_s: float
    target: str
    down_s: float


def plan_kills(
    seed: int,
    *,
    duration_s: float,
    targets: Sequence[str],
    mean_gap_s: float,
    max_down_s: float = 1.0,
) -> list[Kill]:
    """Kills spread over `duration_s`; each comes [0.5, 1.5] x `mean_gap_s` after the previous restart."""
    if not targets:
        raise ValueError("plan_kills needs at least one target to kill")
    if mean_gap_s <= 0 or duration_s <= 0 or max_down_s < 0:
        raise ValueError(
            f"plan_kills needs positive times: duration_s={duration_s}, mean_gap_s={mean_gap_s}, "
            f"max_down_s={max_down_s}"
        )
    rng = random.Random(seed)
    order: list[str] = []
    kills: list[Kill] = []
    at = 0.0
    while True:
        at += rng.uniform(0.5, 1.5) * mean_gap_s
        if at >= duration_s:
            return kills
        if not order:
            order = list(targets)
            rng.shuffle(order)
        down = round(rng.uniform(0.0, max_down_s), 3)
        kills.append(Kill(round(at, 3), order.pop(), down))
        at += down
