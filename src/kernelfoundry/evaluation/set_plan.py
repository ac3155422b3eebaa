"""How many input sets an evaluation holds at once, from what one set costs and the memory there is.

The protocol asks for `trials` input sets for correctness and `timing` sets for the timed calls. At
KernelBench's sizes one set can be gigabytes (LeakyReLU's input is 6.4 GB), and each set held costs its
values on the judge's side, a float64 reference once it is checked, and, where memory is staged, the
runner's own copy on the same device: the eight sets of such a task took an H200's 140 GB and every
evaluation beside them ran out of memory. Where the sets do not fit, fewer are held and the rest are
reached by refreshing a held set in place with a new seed before its next use: the values are as fresh
as a new set's, only the pointer is the same (which the timed calls' refreshes already allow). Where not
even a trial set and two timing sets fit, the trials run on the first timing set (two sets held: a 17 GB
average-pooling input held three times over on each side, beside its 34 GB float64 copy, took more than
an H200 has). Such a plan is also lean: the answer for a set's old values is not kept after a refresh,
so a unit that replays it reads timed_run_wrong rather than cached_result (caught all the same).

Pure arithmetic; engine.py measures the figures. `KF_EVALUATION_SETS_MEMORY_BYTES` (the judge's
environment) fixes the budget instead, e.g. for several executors sharing one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

# Of the memory free when a shape starts, the share its held sets may take: the rest is for the outputs,
# eager's and the reference's temporaries (float64 copies of the inputs while it runs), the previous
# reference kept for the stale-output check, and the other processes on the device.
SETS_MEMORY_SHARE = 0.4
# The timed calls' schedule alternates between sets (verification.plan_calls): two is its least.
MIN_TIMING_SETS = 2


@dataclass(frozen=True)
class SetPlan:
    trial_sets: int  # held for the trials; trial k uses set k % trial_sets, refreshed after its first use
    timing_sets: int  # held for the timed calls (each timed call may refresh its set anyway)
    note: str = ""  # why fewer sets than asked are held ("" when all are)
    shared: bool = False  # the trials run on the first timing set (one trial set, not held apart)

    @property
    def held(self) -> int:
        """The sets held at once."""
        return self.timing_sets + (0 if self.shared else self.trial_sets)

    @property
    def lean(self) -> bool:
        """Memory is short: no reference is kept beyond the one a check needs (engine.py)."""
        return bool(self.note)


# The forward's temporaries (bytes eager allocated beyond its inputs and outputs) kept free before the
# sets' share is taken: the runner's candidate needs about as many while it runs, and the judge's float64
# reference twice as many (not at the same time). Without it a level-1 loss (an 8 GB difference tensor)
# failed in the runner beside the held sets, which read as the candidate's own failure.
WORKING_MEMORY_FACTOR = 2


def working_memory(temporaries_bytes: int, wide_inputs_bytes: int) -> int:
    """The bytes kept free for the forwards before the sets' share is taken: WORKING_MEMORY_FACTOR times
    eager's temporaries, and the float64 copies the high-precision reference makes of the inputs
    (`wide_inputs_bytes`: a level-1 norm's 8.6 GB input is 17 GB more while its reference runs)."""
    return WORKING_MEMORY_FACTOR * temporaries_bytes + wide_inputs_bytes


def sets_budget(free_bytes: int | None, configured: str | None, working_bytes: int = 0) -> int | None:
    """The bytes the held sets may take: `configured` (KF_EVALUATION_SETS_MEMORY_BYTES) when given,
    else SETS_MEMORY_SHARE of the free memory left after `working_bytes` (working_memory); None:
    unknown (every set is held)."""
    if configured:
        try:
            value = int(configured)
        except ValueError:
            raise ValueError(
                f"KF_EVALUATION_SETS_MEMORY_BYTES must be a number of bytes, got {configured!r}"
            ) from None
        if value <= 0:
            raise ValueError(f"KF_EVALUATION_SETS_MEMORY_BYTES must be positive, got {value}")
        return value
    if free_bytes is None:
        return None
    return int(max(0, free_bytes - working_bytes) * SETS_MEMORY_SHARE)


def plan_sets(
    trials: int,
    timing: int,
    set_bytes: int,
    reference_bytes: int,
    budget_bytes: int | None,
    copies: int,
) -> SetPlan:
    """`copies`: the set's values held on the device per set (1: the runner maps the judge's memory; 2:
    the runner holds its own copy). `budget_bytes` (sets_budget) None: unknown, every set is held."""
    if trials < 1 or timing < MIN_TIMING_SETS:
        raise ValueError(f"an evaluation needs a trial set and {MIN_TIMING_SETS} timing sets at least")
    per_set = int(copies * set_bytes + reference_bytes)
    if budget_bytes is None or per_set <= 0:
        return SetPlan(trials, timing)
    fits = int(budget_bytes) // per_set
    if fits >= trials + timing:
        return SetPlan(trials, timing)
    cost = (
        f"one input set costs {per_set / 1e9:.2f} GB here ({copies} cop{'y' if copies == 1 else 'ies'} of "
        f"{set_bytes / 1e9:.2f} GB of inputs, a {reference_bytes / 1e9:.2f} GB reference) and the sets "
        f"may take {budget_bytes / 1e9:.1f} GB"
    )
    others = "the others reached by refreshing a held set with a new seed"
    if fits < 1 + MIN_TIMING_SETS:
        note = (
            f"{cost}: {MIN_TIMING_SETS} set(s) held instead of {trials} trial and {timing} timing sets, the "
            f"trials on the first timing set, {others}"
        )
        return SetPlan(1, MIN_TIMING_SETS, note, shared=True)
    timing_held = max(MIN_TIMING_SETS, min(timing, fits // 2))
    trial_held = max(1, min(trials, fits - timing_held))
    held = f"{trial_held} trial and {timing_held} timing set(s) held instead of {trials} and {timing}"
    note = f"{cost}: {held}, {others}"
    return SetPlan(trial_held, timing_held, note)
