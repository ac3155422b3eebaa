"""The service host's queue-lag probe reads a durable consumer's backlog through the Bus protocol."""

from __future__ import annotations

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.bus.protocol import ConsumerSpec
from kernelfoundry.service_host import pending_probe
from kernelfoundry.v1 import build_pb2

SUBJECT = "kf.compile.cpu.lagarch"


async def test_the_probe_counts_messages_not_yet_delivered_and_fails_for_a_missing_consumer() -> None:
    bus = InMemoryBus()
    probe = pending_probe(bus, subjects.WORK_STREAM, "compiler-lag")
    with pytest.raises(LookupError):
        await probe()  # the gauge keeps its last value rather than reading zero
    sub = await bus.subscribe(
        ConsumerSpec(stream=subjects.WORK_STREAM, durable="compiler-lag", filter_subjects=(SUBJECT,))
    )
    for i in range(3):
        await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id=f"c{i}"), f"compile-c{i}")
    assert await probe() == 3
    [first] = await sub.fetch(1, timeout_s=1.0)
    assert await probe() == 2  # delivered, not yet acked: no longer a backlog
    await first.ack()
    assert await probe() == 2
