"""Pure rules by which the judge verifies timed runs: the call schedule and the checks on claims.

Schedule: the judge, never the runner, decides with an unpredictable random source (secrets) which
input set each call uses (never the set of the call before) and which calls have their outputs checked
afterwards (`check`). Every timed call, warm-up included, first gets fresh values written into its set
(`refresh`): no timed call sees contents the runner has seen before, so a unit that caches its outputs
by a hash of its inputs pays for the whole work on every call. Every shape gets at least MIN_CHECKS
checked calls, the last call always checked, and (from three calls on) one checked call at least is on a
set that an earlier call used: a unit that keeps its answers by input pointer replays one there and is
caught, however few calls the schedule has (with six calls over three sets, random checks alone missed
every reuse in one schedule of three hundred).

Claims: the runner reports its own time per call. Rule 1: a claim may never exceed the judge's own wall
time of that call's round trip (`timing_forged`). Rule 2: the judge times batches of back-to-back calls
from outside, subtracts the fastest round trip of a null command, and the runner's claimed median must be
at least the judge's per-call estimate divided by CLAIM_FACTOR, less an allowance for per-call host
overhead that the claim does not cover (`timing_mismatch`). A forger can therefore understate its time
by at most that factor and allowance.

Rule 2 on a busy host. A claimed call is short and starts right after the runner wakes up, so the
scheduler usually lets it run to the end; a batch runs back to back for tens of milliseconds and shares
the cores with everything else (measured on 2 cores with 4 busy loops: an honest serial matmul used 4.0
ms of CPU per call, claimed 8.0 ms, and its batches took 16-19 ms per call, of which 10-12 ms waiting on a
run queue). So a refusal must reproduce: the judge measures again, this time reading from /proc, for
every batch, how long the runner's threads and its own thread waited on a run queue and how much CPU
every other process used meanwhile (`contention_cross_check`). The wait is subtracted from the batch,
but never more of it than other processes' CPU time can explain (a runner can make its own threads wait,
not other processes run), and the runner's own CPU time must agree with the claim too: no thread of it
may have used more CPU per call than the claim allows, nor all of them together more than the claim
times the threads it was given. On a quiet host nothing is subtracted and Rule 2 is as strict as above;
under load a forger could hide at most the time other processes really ran, and only as waiting time,
while its CPU time still has to fit the claim.

Background work: CPU time the runner's threads other than its main
thread consume while the runner is supposed to be idle (between its reply and the next command) may not
exceed IDLE_CPU_BASE_NS plus IDLE_CPU_SHARE of the last claimed call; its main thread, which sends the reply
and goes back to waiting for the next command (the interpreter's bookkeeping: the reply, freeing the call's
temporaries, a garbage collection), gets IDLE_MAIN_THREAD_BASE_NS instead of IDLE_CPU_BASE_NS
(`background_work`). A unit's own threads are never the main thread; an honest 2-core run was seen at
1.14 ms of main-thread CPU after a reply, over the single 1 ms allowance that the whole process once had.
An excess convicts only when it reproduces: in a second, longer window (IDLE_RECHECK_WINDOW_S of
runner_client) measured at once, or in the next watched window (after the unit's next call). One window
alone is no proof. An honest unit's threads still run a little after the reply: its OpenMP workers,
woken at the call's last barrier, leave it and park after the main thread has replied (microseconds of
CPU; on a loaded 2-core host one was seen starting 1.7 ms after the reply). On a busy host such a tail
can be charged milliseconds: a virtual CPU's stolen time and interrupts are billed to whichever thread
is current, and a running thread's CPU time is read as of its last scheduler update. A CI host loaded by
a benchmark billed 2.6 and 2.9 ms there to an honest glue control, against 1.1 ms allowed. Such a tail is
over within the first window and does not come back call after call, while work left running shows
again in the re-check (a spinning thread) and work started after every reply shows again after the next
call (bursts that end before the re-check). What escapes: work after at most every other call that ends
inside its first window, which can speed up at most half the timed calls (Rule 2 bounds any claim).

Not every window is watched (`watches_idle`): the judge decides at each timed reply, at random with
the schedule's `watch_probability` (1/4 for a hundred calls, more for fewer), whether to watch the
window after it (a wait of at least runner_client's
MIN_IDLE_WINDOW_S and two reads of the runner's threads, on the H200 a third of a level-2 timed call's
fixed cost); it always watches after a batch and after a window over its allowance. The runner learns
whether a window was watched only once it is over (from when the next command comes), so work it leaves
running shows in every watched window: work still running convicts at the first (in its re-check, or
after a batch of the cross-check, every batch being watched), and work after more than half the calls
shows after the window that follows a suspect one with the probability that the next call was one of
them: with 100 timed calls and work after 60% of them, about 15 suspect windows, each convicting with
probability 0.6, missed together with probability 0.4 ** 15 (1e-6). The escape is the one above, no
larger: work after at most every other call.
"""

from __future__ import annotations

import math
import secrets
import statistics
from dataclasses import dataclass

from kernelfoundry.evaluation import reasons
from kernelfoundry.evaluation.reasons import EvaluationFailure

CHECK_PROBABILITY = 0.2
MIN_CHECKS = 3
CLAIM_FACTOR = 1.5
BATCH_TARGET_NS = 50_000_000
MIN_BATCH_CALLS = 3
MAX_BATCH_CALLS = 2000
MAX_BATCH_WALL_NS = 2_000_000_000
BATCH_REPEATS = 3
IDLE_CPU_BASE_NS = 1_000_000
IDLE_MAIN_THREAD_BASE_NS = 10_000_000
IDLE_CPU_SHARE = 0.25
IDLE_WATCHED_OPS = frozenset({"call", "batch"})
IDLE_WATCH_PROBABILITY = 0.25  # the least a schedule of timed calls gets (watch_probability)
IDLE_WATCH_MISS = 1e-9  # the chance a schedule may leave work after every call unseen


@dataclass(frozen=True)
class PlannedCall:
    input_set: int
    refresh: bool
    check: bool


def _draw(probability: float) -> bool:
    return secrets.randbelow(1_000_000) < probability * 1_000_000


def plan_calls(calls: int, input_sets: int) -> list[PlannedCall]:
    """An unpredictable schedule of `calls` calls over `input_sets` (>= 2) sets, every call refreshed."""
    if input_sets < 2:
        raise ValueError("a schedule needs at least two input sets")
    plan: list[PlannedCall] = []
    previous = -1
    for _ in range(calls):
        choices = [s for s in range(input_sets) if s != previous]
        chosen = choices[secrets.randbelow(len(choices))]
        plan.append(PlannedCall(chosen, True, _draw(CHECK_PROBABILITY)))
        previous = chosen
    # The minimum of checked calls, placed at random calls (the last call is always checked).
    while sum(c.check for c in plan) < min(MIN_CHECKS, calls):
        i = secrets.randbelow(calls)
        plan[i] = PlannedCall(plan[i].input_set, True, True)
    if plan:
        plan[-1] = PlannedCall(plan[-1].input_set, True, True)
    _check_a_reused_set(plan)
    return plan


def _check_a_reused_set(plan: list[PlannedCall]) -> None:
    """Make one checked call at least fall on a set an earlier call used (module docstring)."""
    reused: list[int] = []
    seen: set[int] = set()
    for i, call in enumerate(plan):
        if call.input_set in seen:
            if call.check:
                return
            reused.append(i)
        seen.add(call.input_set)
    if reused:
        i = reused[secrets.randbelow(len(reused))]
        plan[i] = PlannedCall(plan[i].input_set, True, True)
    elif len(plan) >= 3:  # every call on a set of its own: the last goes back to the set two calls before
        plan[-1] = PlannedCall(plan[-3].input_set, True, True)


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
    waited_ns: float = 0.0  # run-queue wait subtracted from the best batch (contention_cross_check)
    outsiders_ns: float = 0.0  # CPU time other processes used during that batch

    def describe(self) -> str:
        text = (
            f"claimed median {self.claimed_median_ns / 1e6:.4f} ms; the judge's estimate from "
            f"{self.calls} back-to-back calls {self.estimate_ns / 1e6:.4f} ms per call "
            f"(null round trip {self.null_ns / 1e6:.4f} ms subtracted"
        )
        if self.waited_ns or self.outsiders_ns:
            text += (
                f", measured again: {self.waited_ns / 1e6:.3f} ms of the batch spent waiting for a CPU "
                f"subtracted, other processes used {self.outsiders_ns / 1e6:.3f} ms of CPU meanwhile"
            )
        return text + ")"


def claim_limit_ns(claimed_median_ns: float, allowance_ns: int) -> float:
    """The largest per-call time the judge may measure for a claimed median (CLAIM_FACTOR, allowance)."""
    return CLAIM_FACTOR * claimed_median_ns + allowance_ns


def _mismatch(result: CrossCheck, allowance_ns: int, why: str = "") -> EvaluationFailure:
    return EvaluationFailure(
        reasons.TIMING_MISMATCH,
        f"the runner's claimed times are far below what the judge measured from outside: "
        f"{result.describe()}; allowed: {CLAIM_FACTOR}x the claim plus {allowance_ns / 1e3:.0f} us{why}",
    )


def cross_check(
    claims_ns: list[int], batch_walls_ns: list[int], calls: int, null_walls_ns: list[int], allowance_ns: int
) -> CrossCheck:
    """Rule 2 (raises timing_mismatch). The fastest batch and the fastest null round trip are used:
    interference only makes one slower (a median null, taken at other moments than the batch, could
    subtract a wake-up delay the batch never had)."""
    null_ns = min(null_walls_ns) if null_walls_ns else 0.0
    estimate = max(0.0, (min(batch_walls_ns) - null_ns) / calls)
    result = CrossCheck(float(statistics.median(claims_ns)), estimate, float(null_ns), calls)
    if estimate > claim_limit_ns(result.claimed_median_ns, allowance_ns):
        raise _mismatch(result, allowance_ns)
    return result


@dataclass(frozen=True)
class BatchObservation:
    """One batch as the judge saw it from outside: its wall time and, from /proc, what the scheduler did."""

    wall_ns: int
    calls: int
    runner_waited_ns: int  # the longest run-queue wait of one runner thread during the batch
    judge_waited_ns: int  # the judge's own thread's run-queue wait (its wake-up at the reply)
    outsiders_cpu_ns: int  # CPU time every process but the runner and the judge used meanwhile
    busiest_thread_cpu_ns: int  # CPU time of the runner's busiest thread
    runner_cpu_ns: int  # CPU time of the whole runner (every thread, exited ones included)

    @property
    def explained_wait_ns(self) -> int:
        """The part of the wait other processes can explain: never more than the CPU they used."""
        return min(self.runner_waited_ns + self.judge_waited_ns, self.outsiders_cpu_ns)


def contention_cross_check(
    claims_ns: list[int],
    batches: list[BatchObservation],
    null_walls_ns: list[int],
    allowance_ns: int,
    threads: int,
) -> CrossCheck:
    """Rule 2 measured again where the first measurement refused (raises timing_mismatch).

    Passes when a plain batch of this second measurement agrees with the claim (the first one met a
    burst of load), or when the best batch, less the run-queue wait that other processes' CPU time
    explains, does and the runner's CPU time fits the claim as well: per call, its busiest thread used
    at most the claim's limit, and all its threads together at most that times `threads`."""
    claimed = float(statistics.median(claims_ns))
    limit = claim_limit_ns(claimed, allowance_ns)
    null_ns = float(min(null_walls_ns)) if null_walls_ns else 0.0
    plain = min(max(0.0, (b.wall_ns - null_ns) / b.calls) for b in batches)
    if plain <= limit:
        return CrossCheck(claimed, plain, null_ns, batches[0].calls)

    def corrected(b: BatchObservation) -> float:
        return max(0.0, (b.wall_ns - null_ns - b.explained_wait_ns) / b.calls)

    best = min(batches, key=corrected)
    result = CrossCheck(
        claimed,
        corrected(best),
        null_ns,
        best.calls,
        float(best.explained_wait_ns),
        float(best.outsiders_cpu_ns),
    )
    if result.estimate_ns > limit:
        raise _mismatch(result, allowance_ns)
    busiest = min(b.busiest_thread_cpu_ns / b.calls for b in batches)
    if busiest > limit:
        raise _mismatch(
            result,
            allowance_ns,
            f"; and one runner thread alone used {busiest / 1e6:.4f} ms of CPU per call (/proc)",
        )
    total = min(b.runner_cpu_ns / b.calls for b in batches)
    if total > max(threads, 1) * limit:
        raise _mismatch(
            result,
            allowance_ns,
            f"; and the runner's threads together used {total / 1e6:.4f} ms of CPU per call (/proc), "
            f"more than {max(threads, 1)} thread(s) could in the time claimed",
        )
    return result


@dataclass(frozen=True)
class IdleExcess:
    """CPU time the runner used in an idle window over its allowance (check_idle_cpu's rule)."""

    whose: str
    spent_ns: int
    allowed_ns: float

    def describe(self, context: str, when: str = "", also: str = "") -> str:
        return (
            f"the runner ({self.whose}) used {self.spent_ns / 1e6:.3f} ms of CPU {when}after replying to "
            f"{context}{also}, while it should have been idle (allowed {self.allowed_ns / 1e6:.3f} ms): work "
            "left running after the call"
        )


def watch_probability(calls: int) -> float:
    """The probability of watching each idle window of a schedule of `calls` timed calls: work after
    every call convicts once a watched window is followed by another call (the window after it is then
    watched too), missed when none of the first calls - 1 windows is watched; at least
    IDLE_WATCH_PROBABILITY, and enough that this miss is at most IDLE_WATCH_MISS (100 calls: 0.25, 35:
    0.46, 13: 0.82)."""
    if calls < 2:
        return 1.0
    needed = 1.0 - IDLE_WATCH_MISS ** (1.0 / (calls - 1))
    return min(1.0, max(IDLE_WATCH_PROBABILITY, needed))


def watches_idle(op: str, trial: bool, suspect: bool, probability: float = IDLE_WATCH_PROBABILITY) -> bool:
    """Whether the judge watches the idle window after this reply (module docstring, "Background
    work"): never after a trial call or an op other than a timed call or a batch; always after a batch
    and after a window over its allowance (`suspect`); else with `probability`, drawn now."""
    if op not in IDLE_WATCHED_OPS or trial:
        return False
    return op == "batch" or suspect or _draw(probability)


def idle_excess(idle_cpu_ns: int, last_claim_ns: int, main_thread_ns: int = 0) -> IdleExcess | None:
    """The first of `idle_cpu_ns` (threads other than the main one) and `main_thread_ns` (the main
    thread) over its allowance, or None."""
    share = IDLE_CPU_SHARE * last_claim_ns
    for spent, base, whose in (
        (idle_cpu_ns, IDLE_CPU_BASE_NS, "its threads besides the main one"),
        (main_thread_ns, IDLE_MAIN_THREAD_BASE_NS, "its main thread"),
    ):
        if spent > base + share:
            return IdleExcess(whose, spent, base + share)
    return None


def check_idle_cpu(idle_cpu_ns: int, last_claim_ns: int, context: str, main_thread_ns: int = 0) -> None:
    """CPU time burnt while the runner should have been waiting for the judge's next command:
    `idle_cpu_ns` by threads other than the main one, `main_thread_ns` by the main thread. One window;
    the judge convicts only when an excess reproduces (module docstring, runner_client)."""
    excess = idle_excess(idle_cpu_ns, last_claim_ns, main_thread_ns)
    if excess is not None:
        raise EvaluationFailure(reasons.BACKGROUND_WORK, excess.describe(context))
