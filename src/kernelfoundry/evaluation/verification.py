"""Pure rules by which the judge verifies timed runs: the call schedule and the checks on claims.

Schedule: the judge, never the runner, decides with an unpredictable random source (secrets) which
input set each call uses (never the set of the call before), which calls first get fresh values written
into their set (`refresh`), and which calls have their outputs checked afterwards (`check`); refreshes
and checks are drawn independently. Every shape gets at least MIN_CHECKS checked calls and MIN_REFRESHES
refreshed ones, the last call always checked after a refresh of its set.

Claims: the runner reports its own time per call. Rule 1: a claim may never exceed the judge's own wall
time of that call's round trip (`timing_forged`). Rule 2: the judge times batches of back-to-back calls
from outside, subtracts the round trip of a null command, and the runner's claimed median must be at
least the judge's per-call estimate divided by CLAIM_FACTOR, less an allowance for per-call host
overhead that the claim does not cover (`timing_mismatch`). A forger can therefore understate its time
by at most that factor and allowance. Background work: CPU time the runner's threads other than its main
thread consume while the runner is supposed to be idle (between its reply and the next command) may not
exceed IDLE_CPU_BASE_NS plus IDLE_CPU_SHARE of the last claimed call; its main thread, which sends the reply
and goes back to waiting for the next command (the interpreter's bookkeeping: the reply, freeing the call's
temporaries, a garbage collection), gets IDLE_MAIN_THREAD_BASE_NS instead of IDLE_CPU_BASE_NS
(`background_work`). A unit's own threads are never the main thread; an honest 2-core run was seen at
1.14 ms of main-thread CPU after a reply, over the single 1 ms allowance that the whole process once had.
"""

from __future__ import annotations

import math
import secrets
import statistics
from dataclasses import dataclass

from kernelfoundry.evaluation import reasons
from kernelfoundry.evaluation.reasons import EvaluationFailure

CHECK_PROBABILITY = 0.2
REFRESH_PROBABILITY = 0.1
MIN_CHECKS = 3
MIN_REFRESHES = 2
CLAIM_FACTOR = 1.5
BATCH_TARGET_NS = 50_000_000
MIN_BATCH_CALLS = 3
MAX_BATCH_CALLS = 2000
MAX_BATCH_WALL_NS = 2_000_000_000
BATCH_REPEATS = 3
IDLE_CPU_BASE_NS = 1_000_000
IDLE_MAIN_THREAD_BASE_NS = 10_000_000
IDLE_CPU_SHARE = 0.25


@dataclass(frozen=True)
class PlannedCall:
    input_set: int
    refresh: bool
    check: bool


def _draw(probability: float) -> bool:
    return secrets.randbelow(1_000_000) < probability * 1_000_000


def plan_calls(calls: int, input_sets: int) -> list[PlannedCall]:
    """An unpredictable schedule of `calls` calls over `input_sets` (>= 2) sets."""
    if input_sets < 2:
        raise ValueError("a schedule needs at least two input sets")
    plan: list[PlannedCall] = []
    previous = -1
    for _ in range(calls):
        choices = [s for s in range(input_sets) if s != previous]
        chosen = choices[secrets.randbelow(len(choices))]
        plan.append(PlannedCall(chosen, _draw(REFRESH_PROBABILITY), _draw(CHECK_PROBABILITY)))
        previous = chosen
    # Minimums, placed at random calls (the last call is always a refreshed, checked one).
    for attribute, minimum in (("check", MIN_CHECKS), ("refresh", MIN_REFRESHES)):
        while sum(getattr(c, attribute) for c in plan) < min(minimum, calls):
            i = secrets.randbelow(calls)
            c = plan[i]
            plan[i] = PlannedCall(
                c.input_set, c.refresh or attribute == "refresh", c.check or attribute == "check"
            )
    if plan:
        last = plan[-1]
        plan[-1] = PlannedCall(last.input_set, True, True)
    return plan


def check_claim(claimed_ns: int, wall_ns: int, call: int) -> None:
    """Rule 1: no claimed time above the judge's round trip of the same call."""
    if claimed_ns > wall_ns:
        raise EvaluationFailure(
            reasons.TIMING_FORGED,
            f"timed call {call} claimed {claimed_ns / 1e6:.4f} ms but its whole round trip took "
            f"{wall_ns / 1e6:.4f} ms on the judge's clock",
        )


def batch_calls(claimed_median_ns: float, wall_median_ns: float) -> int:
    """How many back-to-back calls make a batch hold about BATCH_TARGET_NS of claimed work (so the
    judge's clock noise is small against it), bounded by what the judge's own round trips say a
    batch may cost (MAX_BATCH_WALL_NS): a runner claiming too little cannot make the batch endless."""
    wanted = math.ceil(BATCH_TARGET_NS / max(claimed_median_ns, 1.0))
    affordable = math.ceil(MAX_BATCH_WALL_NS / max(wall_median_ns, 1.0))
    return max(MIN_BATCH_CALLS, min(MAX_BATCH_CALLS, wanted, affordable))


@dataclass(frozen=True)
class CrossCheck:
    claimed_median_ns: float
    estimate_ns: float  # the judge's per-call estimate from the best batch
    null_ns: float
    calls: int

    def describe(self) -> str:
        return (
            f"claimed median {self.claimed_median_ns / 1e6:.4f} ms; the judge's estimate from "
            f"{self.calls} back-to-back calls {self.estimate_ns / 1e6:.4f} ms per call "
            f"(null round trip {self.null_ns / 1e6:.4f} ms subtracted)"
        )


def cross_check(
    claims_ns: list[int], batch_walls_ns: list[int], calls: int, null_walls_ns: list[int], allowance_ns: int
) -> CrossCheck:
    """Rule 2 (raises timing_mismatch); the smallest batch is used: interference only makes one slower."""
    null_ns = statistics.median(null_walls_ns) if null_walls_ns else 0.0
    estimate = max(0.0, (min(batch_walls_ns) - null_ns) / calls)
    result = CrossCheck(float(statistics.median(claims_ns)), estimate, float(null_ns), calls)
    if estimate > CLAIM_FACTOR * result.claimed_median_ns + allowance_ns:
        raise EvaluationFailure(
            reasons.TIMING_MISMATCH,
            f"the runner's claimed times are far below what the judge measured from outside: "
            f"{result.describe()}; allowed: {CLAIM_FACTOR}x the claim plus {allowance_ns / 1e3:.0f} us",
        )
    return result


def check_idle_cpu(idle_cpu_ns: int, last_claim_ns: int, context: str, main_thread_ns: int = 0) -> None:
    """CPU time burnt while the runner should have been waiting for the judge's next command:
    `idle_cpu_ns` by threads other than the main one, `main_thread_ns` by the main thread."""
    share = IDLE_CPU_SHARE * last_claim_ns
    for spent, base, whose in (
        (idle_cpu_ns, IDLE_CPU_BASE_NS, "its threads besides the main one"),
        (main_thread_ns, IDLE_MAIN_THREAD_BASE_NS, "its main thread"),
    ):
        allowed = base + share
        if spent > allowed:
            raise EvaluationFailure(
                reasons.BACKGROUND_WORK,
                f"the runner ({whose}) used {spent / 1e6:.3f} ms of CPU after replying to {context}, "
                f"while it should have been idle (allowed {allowed / 1e6:.3f} ms): work left running "
                "after the call",
            )
