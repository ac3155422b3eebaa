"""A run that cannot make progress ends, with a reason, within a bounded time.

Two rules, checked periodically by the evolver (`LivenessWatch.check`, pure; `watch_runs`, the loop):
- unserved: the subject one of the run's steps is published on (kf.generate.<generator>,
  kf.compile.<build target>, kf.execute.<hardware>) is consumed by no worker and served by no configured
  pool (kernelfoundry.api.serving) for longer than KF_RUN_UNSERVED_GRACE_S: the run fails with
  `unserved_<step>: ...`. Submission already refuses such runs; this ends those that lose their workers
  later, or were resumed into a deployment that lacks them.
- stalled: none of the run's counters (generation, candidates generated, compiled, correct, failed) moved
  for KF_RUN_STALL_TIMEOUT_S: nothing answered its requests (a pool that scaled to zero and never came
  back, a generator that never replies); the run fails with `no_progress: ...`.
Never touches a run that has ended, and never cancels work: failing a run is the coordinator's `fail`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kernelfoundry.api.serving import Served, ServingProbe
from kernelfoundry.bus.protocol import Bus, Outgoing
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.services.evolver.state import RunState
from kernelfoundry.telemetry.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class RunView:
    """What liveness needs of a run: its names and its progress counters."""

    run_id: str
    generator: str
    build_target: str
    hardware: str
    progress: tuple[int, ...]

    @classmethod
    def of(cls, run: RunState) -> RunView:
        return cls(
            run_id=run.run_id,
            generator=run.config.generator,
            build_target=run.build_target,
            hardware=run.config.hardware,
            progress=(
                run.generation,
                run.generated,
                run.compiled,
                run.correct,
                run.failed,
                len(run.measurements),
            ),
        )


def unserved_step(view: RunView, served: Served, configured_hardware: frozenset[str]) -> str | None:
    """The first step of the run that nothing serves, as `reason: message`, or None."""
    if view.generator not in served.generators:
        return f"unserved_generator: no llm service serves generator {view.generator!r}"
    configured = view.hardware in configured_hardware  # a configured pool builds for it too
    if not configured and view.build_target not in served.build_targets:
        return f"unserved_build_target: no compiler builds for {view.build_target!r}"
    if view.hardware not in served.hardware:
        return f"unserved_hardware: no executor or configured pool serves {view.hardware!r}"
    return None


@dataclass
class LivenessWatch:
    """Per run: since when a step has been unserved, and since when its counters last moved."""

    unserved_grace_s: float
    stall_timeout_s: float
    configured_hardware: frozenset[str] = frozenset()
    _unserved_since: dict[str, float] = field(default_factory=dict)
    _progress: dict[str, tuple[tuple[int, ...], float]] = field(default_factory=dict)

    def check(self, now: float, runs: Iterable[RunView], served: Served) -> list[tuple[str, str]]:
        """The runs to fail now, as (run id, reason: message); forgets runs no longer given."""
        verdicts: list[tuple[str, str]] = []
        seen: set[str] = set()
        for view in runs:
            seen.add(view.run_id)
            problem = unserved_step(view, served, self.configured_hardware)
            if problem is None:
                self._unserved_since.pop(view.run_id, None)
            else:
                since = self._unserved_since.setdefault(view.run_id, now)
                if now - since >= self.unserved_grace_s:
                    verdicts.append((view.run_id, f"{problem} for {now - since:.0f}s"))
                    continue
            last = self._progress.get(view.run_id)
            if last is None or last[0] != view.progress:
                self._progress[view.run_id] = (view.progress, now)
            elif now - last[1] >= self.stall_timeout_s:
                verdicts.append(
                    (
                        view.run_id,
                        f"no_progress: nothing answered the run's requests for {now - last[1]:.0f}s",
                    )
                )
        for gone in set(self._progress) - seen:
            del self._progress[gone]
        for gone in set(self._unserved_since) - seen:
            del self._unserved_since[gone]
        return verdicts


async def watch_runs(
    stop: asyncio.Event,
    runs: RunCoordinator,
    bus: Bus,
    probe: ServingProbe,
    watch: LivenessWatch,
    *,
    interval_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Every `interval_s`, fail the runs the watch gives up on, and publish their endings."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
            return
        except TimeoutError:
            pass
        try:
            active = [RunView.of(run) for run in list(runs.runs.values()) if run.active]
            verdicts = watch.check(clock(), active, await probe.served())
            out: list[Outgoing] = []
            for run_id, reason in verdicts:
                log.warning("run cannot make progress; failing it", run_id=run_id, reason=reason)
                out += runs.fail(run_id, reason)
            if out:
                await bus.publish_all(out)
        except Exception:  # the bus is down for a moment: judge again at the next round, never stop
            log.warning("liveness check skipped", exc_info=True)
