"""Stream limits and consumer filters on a real JetStream: created as configured, brought to a new
configuration by the next start, and a durable consumer follows a release that consumes other subjects."""

from __future__ import annotations

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import ConsumerSpec
from kernelfoundry.bus.jetstream import JetStreamBus
from kernelfoundry.bus.topology import StreamLimits, Topology
from kernelfoundry.stack.nats_server import NatsServer

ARTIFACTS = f"OBJ_{subjects.ARTIFACT_BUCKET}"


async def _limits(bus: JetStreamBus, stream: str) -> tuple[float, int, int]:
    config = (await bus.js.stream_info(stream)).config
    return (round(config.max_age or 0), int(config.max_bytes or 0), int(config.num_replicas or 0))


async def test_streams_get_the_configured_limits_and_a_restart_updates_them(nats_server: NatsServer) -> None:
    first = Topology(events=StreamLimits(3600, 50_000_000), artifacts=StreamLimits(7200, 20_000_000))
    bus = await JetStreamBus.connect(nats_server.url, name="t", topology=first)
    try:
        assert await _limits(bus, subjects.EVENTS_STREAM) == (3600, 50_000_000, 1)
        assert await _limits(bus, subjects.DEADLETTER_STREAM) == (3600, 50_000_000, 1)
        assert await _limits(bus, ARTIFACTS) == (7200, 20_000_000, 1)
        assert await _limits(bus, subjects.WORK_STREAM) == (0, -1, 1)  # a work queue: acked work leaves
        await bus.put_artifact("c1.so", b"unit")
    finally:
        await bus.close()
    second = Topology(events=StreamLimits(1800, 0), artifacts=StreamLimits(0, 30_000_000))
    bus = await JetStreamBus.connect(nats_server.url, name="t", topology=second)
    try:
        assert await _limits(bus, subjects.EVENTS_STREAM) == (1800, -1, 1)
        assert await _limits(bus, ARTIFACTS) == (0, 30_000_000, 1)
        assert await bus.get_artifact("c1.so") == b"unit"  # an update keeps what is stored
    finally:
        await bus.close()


async def test_a_durable_consumer_follows_new_filter_subjects(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    try:
        old = (subjects.CANDIDATE_COMPILED, subjects.EVALUATION_FINISHED)
        new = (*old, subjects.EVALUATION_FINISHED_ANY)
        await bus.subscribe(
            ConsumerSpec(stream=subjects.EVENTS_STREAM, durable="evolver", filter_subjects=old)
        )
        await bus.subscribe(
            ConsumerSpec(stream=subjects.EVENTS_STREAM, durable="evolver", filter_subjects=new)
        )
        info = await bus.js.consumer_info(subjects.EVENTS_STREAM, "evolver")
        assert set(info.config.filter_subjects or ()) == set(new)
    finally:
        await bus.close()
