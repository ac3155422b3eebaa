"""Cleanup of built units whose candidates are settled.

A candidate's unit (`artifact_name`) is needed until its evaluation is done. Once its result is recorded
(an EvaluationFinished, from its executor or for a dead-lettered request), the unit is deleted `grace_s`
later: the grace covers a request redelivered after its executor published the result but died before
acknowledging it, which still finds its unit. Deletions wait in memory; those a restart loses are left to
the artifact store's age limit (kernelfoundry.bus.topology), which bounds the store either way. Built units
of candidates whose build failed were never stored.

`SettledArtifacts` is an event handler (the store wires it to its own durable consumer on the results) and
a loop that deletes what is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from google.protobuf.message import Message

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery
from kernelfoundry.bus.protocol import Bus, Outgoing
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.v1 import evaluation_pb2

log = get_logger(__name__)

DURABLE = "artifact-cleanup"
FILTER_SUBJECTS = (subjects.EVALUATION_FINISHED, subjects.EVALUATION_FINISHED_ANY)


def grace_for(ack_wait_s: float, max_deliver: int) -> float:
    """Long enough for every redelivery the work consumer allows (the server caps them at max_deliver + 2)."""
    return ack_wait_s * (max_deliver + 2)


def artifact_name(candidate_id: str) -> str:
    """The name a candidate's built unit is stored under."""
    return f"{candidate_id}.so"


@dataclass
class SettledArtifacts:
    """Deletes the unit of each candidate whose result was recorded, `grace_s` after the result."""

    bus: Bus
    grace_s: float
    clock: Callable[[], float] = time.monotonic
    _due: deque[tuple[float, str]] = field(default_factory=deque, init=False)
    deleted: int = field(default=0, init=False)

    async def __call__(self, event: Message, delivery: Delivery) -> Sequence[Outgoing]:
        if isinstance(event, evaluation_pb2.EvaluationFinished) and event.candidate_id:
            self._due.append((self.clock() + self.grace_s, artifact_name(event.candidate_id)))
        return []

    @property
    def waiting(self) -> int:
        return len(self._due)

    async def sweep(self) -> int:
        """Delete every unit that is due; returns how many. A failed deletion is tried on the next sweep."""
        done = 0
        while self._due and self._due[0][0] <= self.clock():
            _, name = self._due[0]
            try:
                await self.bus.delete_artifact(name)
            except Exception as exc:  # the bus is down: keep it for the next sweep
                log.warning("artifact cleanup failed", artifact=name, error=str(exc))
                break
            self._due.popleft()
            done += 1
        self.deleted += done
        return done

    async def run(self, stop: asyncio.Event, every_s: float = 5.0) -> None:
        while not stop.is_set():
            await self.sweep()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
