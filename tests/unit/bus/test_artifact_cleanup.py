"""Built units of settled candidates are deleted once the redeliveries' grace has passed."""

from __future__ import annotations

import asyncio

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.artifact_cleanup import SettledArtifacts, artifact_name, grace_for
from kernelfoundry.bus.consumer import Delivery
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.v1 import build_pb2, evaluation_pb2

DELIVERY = Delivery(subject=subjects.evaluation_finished("cpu.x86_64"), deliveries=1, stream_sequence=1)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def result(candidate: str) -> evaluation_pb2.EvaluationFinished:
    return evaluation_pb2.EvaluationFinished(candidate_id=candidate, hardware="cpu.x86_64")


async def test_a_settled_candidates_unit_is_deleted_after_the_grace() -> None:
    bus, clock = InMemoryBus(), Clock()
    cleanup = SettledArtifacts(bus, grace_s=60.0, clock=clock)
    for candidate in ("c1", "c2", "c3"):
        await bus.put_artifact(artifact_name(candidate), b"unit")
    assert await cleanup(result("c1"), DELIVERY) == []
    clock.now = 30.0
    await cleanup(result("c2"), DELIVERY)
    await cleanup(build_pb2.CandidateCompiled(candidate_id="c3"), DELIVERY)  # not a result: kept
    assert await cleanup.sweep() == 0  # within the grace, a redelivered request still finds its unit
    clock.now = 60.0
    assert await cleanup.sweep() == 1
    with pytest.raises(LookupError):
        await bus.get_artifact("c1.so")
    assert await bus.get_artifact("c2.so") == b"unit"
    clock.now = 90.0
    assert await cleanup.sweep() == 1
    assert cleanup.deleted == 2 and cleanup.waiting == 0
    assert await bus.get_artifact("c3.so") == b"unit"


async def test_a_failed_deletion_is_tried_again_on_the_next_sweep() -> None:
    bus, clock = InMemoryBus(), Clock()
    cleanup = SettledArtifacts(bus, grace_s=0.0, clock=clock)
    await bus.put_artifact("c1.so", b"unit")
    await cleanup(result("c1"), DELIVERY)
    await bus.close()  # the bus is down
    assert await cleanup.sweep() == 0 and cleanup.waiting == 1


async def test_the_loop_sweeps_until_stopped() -> None:
    bus = InMemoryBus()
    cleanup = SettledArtifacts(bus, grace_s=0.0)
    await bus.put_artifact("c1.so", b"unit")
    await cleanup(result("c1"), DELIVERY)
    stop = asyncio.Event()
    task = asyncio.create_task(cleanup.run(stop, every_s=0.01))
    for _ in range(100):
        if cleanup.deleted:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 2)
    assert cleanup.deleted == 1


def test_the_grace_covers_every_redelivery() -> None:
    assert grace_for(30.0, 5) == 30.0 * 7
