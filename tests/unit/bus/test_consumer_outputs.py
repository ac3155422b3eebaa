"""The consumer loop publishes a handled message's outputs until they go through, without re-running the
handler (fakes for the bus and the message; the real broker's behaviour is in tests/integration/bus)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Consumer, ConsumerSpec, Delivery, decoder_for
from kernelfoundry.bus.protocol import Outgoing
from kernelfoundry.v1 import build_pb2


class FlakyBus:
    """A bus whose first `failures` publishes raise, as while the broker restarts."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0
        self.published: list[str] = []

    async def publish_all(self, messages: list[Outgoing]) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise ConnectionError("nats: connection closed")
        self.published += [m.msg_id for m in messages]


class FakeMsg:
    def __init__(self, data: bytes) -> None:
        self.subject = "kf.compile.cpu.x86_64"
        self.data = data
        self.deliveries = 1
        self.stream_sequence = 7
        self.calls: list[str] = []

    async def ack(self) -> None:
        self.calls.append("ack")

    async def nak(self, delay: float | None = None) -> None:
        self.calls.append("nak")

    async def in_progress(self) -> None:
        self.calls.append("in_progress")

    async def term(self) -> None:
        self.calls.append("term")


async def test_outputs_that_fail_to_publish_are_retried_and_the_handler_runs_once() -> None:
    bus = FlakyBus(failures=2)
    handled: list[str] = []

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        handled.append(message.candidate_id)
        done = build_pb2.CandidateCompiled(candidate_id=message.candidate_id, ok=True)
        return [Outgoing(subjects.CANDIDATE_COMPILED, done, f"compiled-{message.candidate_id}")]

    spec = ConsumerSpec(
        stream=subjects.WORK_STREAM, durable="t", filter_subjects=("kf.compile.>",), publish_retry_s=0.001
    )
    consumer = Consumer(bus, spec, decoder_for(build_pb2.CompileCandidate), handler, service="test")  # type: ignore[arg-type]
    msg: Any = FakeMsg(build_pb2.CompileCandidate(candidate_id="c1").SerializeToString())
    await consumer._process(msg)
    assert handled == ["c1"]
    assert bus.attempts == 3 and bus.published == ["compiled-c1"]
    assert msg.calls == ["ack"]
    assert (consumer.stats.handled, consumer.stats.failed) == (1, 0)
