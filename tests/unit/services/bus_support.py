"""Running a service's handler on the in-memory bus through the real consumer loop, and reading what it
published, for the handler tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf.message import Message

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Consumer, Handler
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.bus.protocol import ConsumerSpec

M = TypeVar("M", bound=Message)


def work_spec(durable: str, subject: str, **changes: Any) -> ConsumerSpec:
    base: dict[str, Any] = dict(
        stream=subjects.WORK_STREAM,
        durable=durable,
        filter_subjects=(subject,),
        ack_wait_s=30.0,
        max_deliver=3,
        heartbeat_s=1.0,
        publish_retry_s=0.01,
    )
    base.update(changes)
    return ConsumerSpec(**base)


async def consume_until(
    bus: InMemoryBus,
    spec: ConsumerSpec,
    decode: Callable[[str, bytes], Any],
    handler: Handler[Any],
    done: Callable[[Consumer[Any]], bool],
    timeout_s: float = 120.0,
) -> Consumer[Any]:
    """Run `handler` in a consumer loop on `bus` until `done(consumer)`; the loop is stopped after."""
    consumer: Consumer[Any] = Consumer(bus, spec, decode, handler, service="test")
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not done(consumer):
            assert asyncio.get_running_loop().time() < deadline, f"not done in time: {consumer.stats}"
            assert not task.done(), "the consumer loop ended"
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    return consumer


async def published(bus: InMemoryBus, stream: str, subject: str, message_type: type[M]) -> list[M]:
    """The messages on `subject` not read by an earlier call, in order (a durable reader per subject)."""
    durable = f"reader-{subject.replace('.', '-').replace('>', 'all').replace('*', 'any')}"
    sub = await bus.subscribe(
        ConsumerSpec(stream=stream, durable=durable, filter_subjects=(subject,), max_ack_pending=10_000)
    )
    found: list[M] = []
    while True:
        batch = await sub.fetch(100, timeout_s=0.05)
        if not batch:
            return found
        for message in batch:
            found.append(message_type.FromString(message.data))
            await message.ack()
