"""Resume waits for the store's durable consumer to catch up with the event history (through the Bus
protocol, here on the in-memory bus)."""

from __future__ import annotations

from kernelfoundry.bus import subjects
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.bus.protocol import ConsumerSpec
from kernelfoundry.services.evolver.resume import wait_for_store
from kernelfoundry.v1 import run_pb2

STORE = ConsumerSpec(
    stream=subjects.EVENTS_STREAM, durable="store", filter_subjects=(f"{subjects.EVENTS_PREFIX}.>",)
)


async def test_a_fresh_system_needs_no_wait() -> None:
    assert await wait_for_store(InMemoryBus(), timeout_s=1.0)


async def test_history_without_a_store_consumer_is_waited_for_until_the_timeout() -> None:
    bus = InMemoryBus()
    await bus.publish(subjects.RUN_SUBMITTED, run_pb2.RunSubmitted(run_id="r1"), "submitted-r1")
    assert not await wait_for_store(bus, timeout_s=0.8)


async def test_the_store_is_caught_up_only_once_every_event_is_acked() -> None:
    bus = InMemoryBus()
    await bus.publish(subjects.RUN_SUBMITTED, run_pb2.RunSubmitted(run_id="r1"), "submitted-r1")
    store = await bus.subscribe(STORE)
    assert not await wait_for_store(bus, timeout_s=0.5)  # pending
    [event] = await store.fetch(1, timeout_s=1.0)
    assert not await wait_for_store(bus, timeout_s=0.5)  # delivered, not acked
    await event.ack()
    assert await wait_for_store(bus, timeout_s=0.5)
