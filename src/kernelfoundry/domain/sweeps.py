"""Template parameter optimisation: parse a kernel's tunables and search their values.

Tunables are declared in the source with a comment line

    // @kf.tunable BLOCK_SIZE in [64, 128, 256, 512] default 256

`parse_tunables` reads them. A sweep hands out MANY settings at once (`next_batch(n)`, a batch to
evaluate in parallel), takes results back (`report(params, runtime_or_failure)`) and knows the best so far
(`best()`). Small domains are swept exhaustively (`GridSweep`); large ones by a guided
`CoordinateSweep`: from the best point so far, every value of every coordinate is tried in one batch
(a parallel line search), plus the point combining each coordinate's best value; it stops when a round
brings no improvement. `SweepBook` keeps the best setting per (task, shape, device).

This module must never perform I/O or read a clock.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelfoundry.domain.kernel import Tunable, TunableValue

Params = dict[str, TunableValue]
DEFAULT_GRID_LIMIT = 16  # larger domains get the coordinate sweep: a grid spends an evaluation per point

_TUNABLE = re.compile(
    r"//\s*@kf\.tunable\s+(?P<name>[A-Za-z_]\w*)\s+in\s+\[(?P<values>[^\]]*)\]"
    r"(?:\s+default\s+(?P<default>\S+))?[ \t]*$",
    re.MULTILINE,
)
_MARKER = re.compile(r"//\s*@kf\.tunable\b")


class SweepError(ValueError):
    """A tunable declaration or sweep request that cannot be used; `reason` is a short code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


def _value(text: str) -> TunableValue:
    text = text.strip().strip("\"'")
    try:
        return int(text)
    except ValueError:
        return text


def parse_tunables(code: str) -> tuple[Tunable, ...]:
    """Every `// @kf.tunable NAME in [a, b, c] default b` line of `code`, in order of appearance."""
    tunables: list[Tunable] = []
    seen: set[str] = set()
    for line in code.splitlines():
        if not _MARKER.search(line):
            continue
        m = _TUNABLE.search(line)
        if m is None:
            raise SweepError("invalid_tunable", f"cannot parse tunable declaration: {line.strip()!r}")
        name = m["name"]
        values = tuple(_value(v) for v in m["values"].split(",") if v.strip())
        if not values:
            raise SweepError("invalid_tunable", f"tunable {name} declares no values")
        if len(set(values)) != len(values):
            raise SweepError("invalid_tunable", f"tunable {name} repeats a value: {list(values)}")
        default = _value(m["default"]) if m["default"] is not None else values[0]
        if default not in values:
            raise SweepError("invalid_tunable", f"tunable {name} default {default!r} not in {list(values)}")
        if name in seen:
            raise SweepError("invalid_tunable", f"tunable {name} declared twice")
        seen.add(name)
        tunables.append(Tunable(name, values, default))
    return tuple(tunables)


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepBook:
        book = cls()
        for k, cid, p, r in data.get("best", []):
            book._best[(k[0], k[1], k[2])] = BestSetting(cid, dict(p), float(r))
        return book


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
