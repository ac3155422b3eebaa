"""Template parameter optimisation: search the values of a kernel's tunables.

Tunables are declared in the source with a comment line

    // @kf.tunable BLOCK_SIZE in [64, 128, 256, 512] default 256

and read by `kernelfoundry.domain.tunables.parse_tunables` (the one parser; the name is re-exported
here for callers that import it with the sweeps). A sweep hands out MANY settings at once
(`next_batch(n)`, a batch to evaluate in parallel), takes results back
(`report(params, runtime_or_failure)`) and knows the best so far (`best()`). Small domains are swept
exhaustively (`GridSweep`); large ones by a guided
`CoordinateSweep`: from the best point so far, every value of every coordinate is tried in one batch
(a parallel line search), plus the point combining each coordinate's best value; it stops when a round
brings no improvement. `SweepBook` keeps the best setting per (task, shape, device).

This module must never perform I/O or read a clock.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelfoundry.domain.kernel import Tunable, TunableValue
from kernelfoundry.domain.tunables import parse_tunables as parse_tunables

Params = dict[str, TunableValue]
DEFAULT_GRID_LIMIT = 16  # larger domains get the coordinate sweep: a grid spends an evaluation per point


class SweepError(ValueError):
    """A sweep request that cannot be used; `reason` is a short code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


@dataclass(frozen=True)
class SweepFailure:
    """A setting that failed (did not compile, was wrong, timed out): it can never be the best."""

    reason: str
    message: str = ""


def domain_size(tunables: Sequence[Tunable]) -> int:
    return math.prod(len(t.values) for t in tunables)


def _key(params: Mapping[str, TunableValue]) -> tuple[tuple[str, TunableValue], ...]:
    return tuple(sorted(params.items()))


class SweepPlan:
    """Common bookkeeping: pending, in-flight and finished settings, and the best runtime seen."""

    kind = "base"

    def __init__(self, tunables: Sequence[Tunable]) -> None:
        if not tunables:
            raise SweepError("no_tunables", "a sweep needs at least one tunable")
        self.tunables = tuple(tunables)
        self._queue: list[Params] = []
        self._in_flight: set[tuple[tuple[str, TunableValue], ...]] = set()
        self.results: dict[tuple[tuple[str, TunableValue], ...], float | SweepFailure] = {}

    def _validate(self, params: Mapping[str, TunableValue]) -> None:
        for t in self.tunables:
            if params.get(t.name) not in t.values:
                raise SweepError("invalid_params", f"{t.name}={params.get(t.name)!r} not in {list(t.values)}")

    def _enqueue(self, params: Params) -> None:
        key = _key(params)
        if key in self.results or key in self._in_flight or any(_key(q) == key for q in self._queue):
            return
        self._queue.append(params)

    def _refill(self) -> None:
        """Queue the next round when the current one is exhausted (subclasses decide what)."""

    def next_batch(self, n: int) -> list[Params]:
        """Up to `n` settings to evaluate now; empty when waiting for results or finished."""
        if not self._queue and not self._in_flight:
            self._refill()
        batch = self._queue[:n]
        del self._queue[:n]
        self._in_flight.update(_key(p) for p in batch)
        return [dict(p) for p in batch]

    def report(self, params: Mapping[str, TunableValue], result: float | SweepFailure) -> None:
        """The runtime (seconds, lower is better) of a setting, or why it failed."""
        self._validate(params)
        key = _key(params)
        self._in_flight.discard(key)
        if not isinstance(result, SweepFailure):
            runtime = float(result)
            result = (
                runtime
                if math.isfinite(runtime) and runtime > 0
                else SweepFailure("no_timing", f"runtime {runtime!r} is not a positive finite number")
            )
        self.results[key] = result

    @property
    def evaluations(self) -> int:
        return len(self.results)

    @property
    def done(self) -> bool:
        if self._queue or self._in_flight:
            return False
        self._refill()
        return not self._queue

    def best(self) -> tuple[Params, float] | None:
        timed = [(k, r) for k, r in self.results.items() if not isinstance(r, SweepFailure)]
        if not timed:
            return None
        key, runtime = min(timed, key=lambda kr: (kr[1], kr[0]))
        return dict(key), runtime  # type: ignore[arg-type]


class GridSweep(SweepPlan):
    """Every combination, in a fixed order starting from the defaults."""

    kind = "grid"

    def __init__(self, tunables: Sequence[Tunable]) -> None:
        super().__init__(tunables)
        self._enqueue({t.name: t.default for t in self.tunables})
        names = [t.name for t in self.tunables]
        for combo in itertools.product(*(t.values for t in self.tunables)):
            self._enqueue(dict(zip(names, combo, strict=True)))


class CoordinateSweep(SweepPlan):
    """Parallel coordinate search from the best point so far; stops after a round without improvement
    or after `max_rounds` rounds."""

    kind = "coordinate"

    def __init__(
        self,
        tunables: Sequence[Tunable],
        start: Mapping[str, TunableValue] | None = None,
        max_rounds: int = 8,
    ) -> None:
        super().__init__(tunables)
        self.max_rounds = max_rounds
        self.rounds = 0
        self._center: Params = {t.name: t.default for t in self.tunables}
        if start:
            self._center.update(start)
        self._validate(self._center)
        self._last_best: float | None = None
        self._finished = False
        self._round()

    def _round(self) -> None:
        self.rounds += 1
        self._enqueue(dict(self._center))
        for t in self.tunables:
            for v in t.values:
                self._enqueue({**self._center, t.name: v})

    def _line_best(self) -> Params:
        """Each coordinate's best value on its line through the centre, combined."""
        combined = dict(self._center)
        for t in self.tunables:
            best_v, best_r = self._center[t.name], math.inf
            for v in t.values:
                r = self.results.get(_key({**self._center, t.name: v}))
                if isinstance(r, float) and r < best_r:
                    best_v, best_r = v, r
            combined[t.name] = best_v
        return combined

    def _refill(self) -> None:
        if self._finished:
            return
        combined = self._line_best()
        if _key(combined) not in self.results:
            self._enqueue(combined)  # a one-point round: try the combination before moving
            return
        found = self.best()
        if (
            found is None
            or self.rounds >= self.max_rounds
            or (self._last_best is not None and found[1] >= self._last_best)
        ):
            self._finished = True
            return
        self._last_best = found[1]
        self._center = found[0]
        self._round()
        if not self._queue:  # every point of the new round was seen already
            self._finished = True


def plan_sweep(
    tunables: Sequence[Tunable],
    grid_limit: int = DEFAULT_GRID_LIMIT,
    start: Mapping[str, TunableValue] | None = None,
) -> SweepPlan:
    """A grid when the domain has at most `grid_limit` points, a guided coordinate sweep otherwise."""
    if domain_size(tunables) <= grid_limit:
        return GridSweep(tunables)
    return CoordinateSweep(tunables, start=start)


SweepKey = tuple[str, str, str]  # (task, shape, device)


@dataclass(frozen=True)
class BestSetting:
    candidate_id: str
    params: Mapping[str, TunableValue]
    runtime_s: float


class SweepBook:
    """The fastest (kernel, setting) found per (task, shape, device): what a run hands out per shape."""

    def __init__(self) -> None:
        self._best: dict[SweepKey, BestSetting] = {}

    def offer(
        self,
        task: str,
        shape: str,
        device: str,
        candidate_id: str,
        params: Mapping[str, TunableValue],
        runtime_s: float,
    ) -> bool:
        """Keep the setting when it is the fastest so far for its key; return whether it was kept."""
        key = (task, shape, device)
        current = self._best.get(key)
        if current is not None and current.runtime_s <= runtime_s:
            return False
        self._best[key] = BestSetting(candidate_id, dict(params), runtime_s)
        return True

    def best(self, task: str, shape: str, device: str) -> BestSetting | None:
        return self._best.get((task, shape, device))

    def entries(self) -> list[tuple[SweepKey, BestSetting]]:
        """Every kept setting, ordered by (task, shape, device)."""
        return sorted(self._best.items(), key=lambda item: item[0])

    def to_dict(self) -> dict[str, Any]:
        return {
            "best": [
                [list(k), b.candidate_id, dict(b.params), b.runtime_s] for k, b in sorted(self._best.items())
            ]
        }


@dataclass(frozen=True)
class SweepJob:
    """One setting of one sweep, to compile (with -DNAME=value) and time on one shape and device."""

    sweep_id: str
    candidate_id: str
    shape: str
    device: str
    params: Mapping[str, TunableValue]


class SweepCampaign:
    """All parameter sweeps of one task: several kernels, shapes and devices at once.

    `start` opens a sweep for a kernel's tunables on one shape and device (idempotent); `next_batch(n)`
    hands out jobs round-robin over the open sweeps, so none starves; `report` feeds a runtime or a
    failure back and updates the `SweepBook` with every timed setting.
    """

    def __init__(self, task: str, grid_limit: int = DEFAULT_GRID_LIMIT) -> None:
        self.task = task
        self.grid_limit = grid_limit
        self.book = SweepBook()
        self.plans: dict[str, SweepPlan] = {}
        self._meta: dict[str, tuple[str, str, str]] = {}  # sweep id -> (candidate, shape, device)
        self._cursor = 0

    @staticmethod
    def sweep_id(candidate_id: str, shape: str, device: str) -> str:
        return f"{candidate_id}/{shape}/{device}"

    def start(
        self,
        candidate_id: str,
        tunables: Sequence[Tunable],
        shape: str,
        device: str,
        start: Mapping[str, TunableValue] | None = None,
    ) -> str:
        sid = self.sweep_id(candidate_id, shape, device)
        if sid not in self.plans:
            self.plans[sid] = plan_sweep(tunables, self.grid_limit, start)
            self._meta[sid] = (candidate_id, shape, device)
        return sid

    def active(self) -> list[str]:
        return [sid for sid, plan in self.plans.items() if not plan.done]

    def next_batch(self, n: int, priority: Callable[[str], float] | None = None) -> list[SweepJob]:
        """Up to n jobs, round-robin over the open sweeps so none starves; with `priority(candidate_id)`
        each round visits the sweeps from the highest-priority kernel down (the fastest kernel's next
        point comes first, and a long sweep of a slower kernel cannot crowd it out)."""
        if priority is not None:
            return self._by_priority(n, priority)
        jobs: list[SweepJob] = []
        ids = list(self.plans)
        idle = 0
        while len(jobs) < n and ids and idle < len(ids):
            sid = ids[self._cursor % len(ids)]
            self._cursor += 1
            got = self.plans[sid].next_batch(1)
            if not got:
                idle += 1
                continue
            idle = 0
            candidate_id, shape, device = self._meta[sid]
            jobs.append(SweepJob(sid, candidate_id, shape, device, got[0]))
        return jobs

    def _by_priority(self, n: int, priority: Callable[[str], float]) -> list[SweepJob]:
        jobs: list[SweepJob] = []
        ranked = sorted(self.plans, key=lambda sid: -priority(self._meta[sid][0]))
        while len(jobs) < n:
            handed = 0
            for sid in ranked:
                got = self.plans[sid].next_batch(1)
                if got:
                    candidate_id, shape, device = self._meta[sid]
                    jobs.append(SweepJob(sid, candidate_id, shape, device, got[0]))
                    handed += 1
                    if len(jobs) >= n:
                        break
            if handed == 0:
                break
        return jobs

    def report(self, job: SweepJob, result: float | SweepFailure) -> None:
        plan = self.plans.get(job.sweep_id)
        if plan is None:
            raise SweepError("unknown_sweep", f"no sweep {job.sweep_id!r} in task {self.task!r}")
        plan.report(job.params, result)
        if not isinstance(result, SweepFailure) and math.isfinite(result) and result > 0:
            self.book.offer(self.task, job.shape, job.device, job.candidate_id, job.params, float(result))

    def best(self, shape: str, device: str) -> BestSetting | None:
        return self.book.best(self.task, shape, device)


# -- the evolver's sweep policy: which kernels are swept, how many points a generation, what a result is --
# Evaluations aggregate every shape of the task; the evolver's sweeps tune for that aggregate.
ALL_SHAPES = "all"
# Placements after which an elite's tunables are worth sweeping.
SWEEP_TRIGGERS = ("new_cell", "elite_replaced", "improvement")
# Sweep only kernels within this fraction of the run's best: a setting rarely moves a kernel further, and
# every sweep point is an evaluation the search could have spent elsewhere.
SWEEP_NEAR_BEST = 0.75
FAILURE_MESSAGE_LIMIT = 200  # characters of an evaluation's message kept with a failed sweep point


def worth_sweeping(outcome_label: str, tunables: Sequence[Tunable], enabled: bool) -> bool:
    """Whether a freshly placed kernel's tunables are swept: sweeps on, tunables declared, and its
    placement a new cell, a replaced elite or an improvement."""
    return enabled and bool(tunables) and outcome_label in SWEEP_TRIGGERS


def sweep_points_per_generation(population: int) -> int:
    """As many sweep points as generation requests, so both searches advance."""
    return max(1, population)


def sweeps_first(barren_generations: int) -> bool:
    """Whether a generation hands the evaluation budget to the sweeps' points before the generator's
    requests: when the generator's last generation brought nothing new (asking again is likely to bring
    nothing again, while a declared tunable's other values are known to be untried)."""
    return barren_generations > 0


def stale_sweep(candidate_id: str, elites: Mapping[str, float], best_speedup: float) -> SweepFailure | None:
    """Why a sweep point is answered at once without an evaluation (its kernel is no longer an elite, or
    fell behind the run's best), or None when it is worth evaluating. `elites`: id -> speedup."""
    if candidate_id not in elites:
        return SweepFailure("superseded", "the swept kernel is no longer elite")
    if elites[candidate_id] < SWEEP_NEAR_BEST * best_speedup:
        return SweepFailure("superseded", "the swept kernel fell behind the best")
    return None


def point_result(
    failed: bool, runtime_s: float | None, reason: str | None, message: str
) -> float | SweepFailure:
    """A sweep point's result: its runtime when its evaluation succeeded and was timed, else a failure."""
    if not failed and runtime_s:
        return runtime_s
    return SweepFailure(reason or "failed", message[:FAILURE_MESSAGE_LIMIT])


def known_point_result(correct: bool, runtime_ms: float) -> float | SweepFailure:
    """A sweep point whose setting the run already has: that candidate's runtime when it was evaluated
    correct and timed, else a duplicate (failed, or not evaluated yet)."""
    if correct and runtime_ms > 0:
        return runtime_ms / 1000.0
    return SweepFailure("duplicate", "this setting was already tried")
