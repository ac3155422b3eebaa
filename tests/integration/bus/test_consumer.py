"""The shared consumer loop against a real JetStream server."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Consumer, ConsumerSpec, Delivery, Reject, Retry, decoder_for
from kernelfoundry.bus.jetstream import JetStreamBus, Outgoing
from kernelfoundry.stack.nats_server import NatsServer
from kernelfoundry.v1 import build_pb2, run_pb2

SUBJECT = "kf.compile.cpu.testarch"


def spec(**kw: object) -> ConsumerSpec:
    base = dict(
        stream=subjects.WORK_STREAM,
        durable="test-compiler",
        filter_subjects=(SUBJECT,),
        ack_wait_s=2.0,
        max_deliver=3,
        heartbeat_s=0.5,
    )
    base.update(kw)
    return ConsumerSpec(**base)  # type: ignore[arg-type]


async def run_until(consumer: Consumer, condition, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while not condition():
            assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def dead_letters(bus: JetStreamBus) -> list[run_pb2.DeadLetter]:
    sub = await bus.js.pull_subscribe(f"{subjects.DEADLETTER_PREFIX}.>", stream=subjects.DEADLETTER_STREAM)
    letters = []
    try:
        for msg in await sub.fetch(10, timeout=1.0):
            letter = run_pb2.DeadLetter()
            letter.ParseFromString(msg.data)
            letters.append(letter)
    except Exception:
        pass
    return letters


async def test_publish_with_the_same_message_id_is_stored_once(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    message = build_pb2.CompileCandidate(candidate_id="c1")
    assert await bus.publish(SUBJECT, message, "compile-c1") is False
    assert await bus.publish(SUBJECT, message, "compile-c1") is True
    info = await bus.js.stream_info(subjects.WORK_STREAM)
    assert info.state.messages == 1
    await bus.close()


async def test_handler_outputs_are_published_and_the_message_acked(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    seen: list[str] = []

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        seen.append(message.candidate_id)
        done = build_pb2.CandidateCompiled(candidate_id=message.candidate_id, ok=True)
        return [Outgoing(subjects.CANDIDATE_COMPILED, done, f"compiled-{message.candidate_id}")]

    consumer = Consumer(bus, spec(), decoder_for(build_pb2.CompileCandidate), handler, service="test")
    await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id="c1"), "compile-c1")
    await run_until(consumer, lambda: consumer.stats.handled == 1)
    assert seen == ["c1"]
    events = await bus.js.stream_info(subjects.EVENTS_STREAM)
    assert events.state.messages == 1
    work = await bus.js.stream_info(subjects.WORK_STREAM)
    assert work.state.messages == 0  # acked work is removed from the work queue
    await bus.close()


async def test_undecodable_message_is_dead_lettered_with_its_reason(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        raise AssertionError("never called for poison")

    consumer = Consumer(bus, spec(), decoder_for(build_pb2.CompileCandidate), handler, service="test")
    await bus.js.publish(SUBJECT, b"\xff\xff not protobuf", headers={"Nats-Msg-Id": "poison"})
    await run_until(consumer, lambda: consumer.stats.dead_lettered == 1)
    letters = await dead_letters(bus)
    assert [letter.reason for letter in letters] == ["undecodable"]
    assert letters[0].subject == SUBJECT
    await bus.close()


async def test_an_event_two_consumers_give_up_on_leaves_a_letter_from_each(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")

    async def handler(message: build_pb2.CandidateCompiled, delivery: Delivery) -> Sequence[Outgoing]:
        raise AssertionError("never called for poison")

    consumers = [
        Consumer(
            bus,
            spec(stream=subjects.EVENTS_STREAM, durable=name, filter_subjects=(subjects.CANDIDATE_COMPILED,)),
            decoder_for(build_pb2.CandidateCompiled),
            handler,
            service=name,
        )
        for name in ("test-store", "test-evolver")
    ]
    await bus.js.publish(subjects.CANDIDATE_COMPILED, b"\xff\xff poison", headers={"Nats-Msg-Id": "p"})
    for consumer in consumers:
        await run_until(consumer, lambda c=consumer: c.stats.dead_lettered == 1)  # type: ignore[misc]
    letters = await dead_letters(bus)
    assert sorted((letter.service, letter.reason) for letter in letters) == [
        ("test-evolver", "undecodable"),
        ("test-store", "undecodable"),
    ]
    await bus.close()


async def test_rejected_message_is_dead_lettered_at_once(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        raise Reject("bad_request", "no such build target")

    consumer = Consumer(bus, spec(), decoder_for(build_pb2.CompileCandidate), handler, service="test")
    await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id="c1"), "compile-c1")
    await run_until(consumer, lambda: consumer.stats.dead_lettered == 1)
    letters = await dead_letters(bus)
    assert letters[0].reason == "bad_request" and "no such build target" in letters[0].message
    await bus.close()


async def test_failing_handler_is_retried_then_dead_lettered_not_looped(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    calls: list[int] = []

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        calls.append(delivery.deliveries)
        raise RuntimeError("toolchain exploded")

    consumer = Consumer(
        bus, spec(max_deliver=3), decoder_for(build_pb2.CompileCandidate), handler, service="test"
    )
    await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id="c1"), "compile-c1")
    await run_until(consumer, lambda: consumer.stats.dead_lettered == 1, timeout=30)
    assert calls == [1, 2, 3]
    letters = await dead_letters(bus)
    assert letters[0].reason == "handler_error" and "toolchain exploded" in letters[0].message
    await bus.close()


async def test_retry_redelivers_the_message(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    calls: list[int] = []

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        calls.append(delivery.deliveries)
        if len(calls) == 1:
            raise Retry("artifact not there yet", delay_s=0.1)
        return []

    consumer = Consumer(bus, spec(), decoder_for(build_pb2.CompileCandidate), handler, service="test")
    await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id="c1"), "compile-c1")
    await run_until(consumer, lambda: consumer.stats.handled == 1)
    assert calls == [1, 2]
    await bus.close()


async def test_long_handler_keeps_its_message_with_heartbeats(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    calls: list[int] = []

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        calls.append(delivery.deliveries)
        await asyncio.sleep(3.5)  # longer than ack_wait (2 s): only in-progress acks keep it ours
        return []

    consumer = Consumer(bus, spec(), decoder_for(build_pb2.CompileCandidate), handler, service="test")
    await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id="c1"), "compile-c1")
    await run_until(consumer, lambda: consumer.stats.handled == 1)
    await asyncio.sleep(0.5)
    assert calls == [1]
    await bus.close()


@pytest.mark.timeout(60)
async def test_consumer_rebinds_after_a_broker_restart(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    seen: list[str] = []

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        seen.append(message.candidate_id)
        return []

    consumer = Consumer(bus, spec(), decoder_for(build_pb2.CompileCandidate), handler, service="test")
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id="before"), "compile-before")
    while seen != ["before"]:
        await asyncio.sleep(0.05)
    port = nats_server.url.rsplit(":", 1)[1]
    nats_server.stop()
    restarted = NatsServer(nats_server.store_dir, port=int(port))
    restarted.start()
    try:
        for _ in range(100):
            try:
                await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id="after"), "compile-after")
                break
            except Exception:
                await asyncio.sleep(0.2)
        deadline = asyncio.get_running_loop().time() + 30
        while "after" not in seen:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
        await bus.close()
        restarted.stop()


async def settled(bus: JetStreamBus):  # type: ignore[no-untyped-def]
    """The test consumer's info once no ack is outstanding (an ack is a publish: the server applies it
    a moment later), or as it is after 5 s."""
    for _ in range(50):
        info = await bus.js.consumer_info(subjects.WORK_STREAM, "test-compiler")
        if info.num_ack_pending == 0:
            break
        await asyncio.sleep(0.1)
    return info


async def test_a_consumer_with_concurrency_handles_several_messages_at_once(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    inside = 0
    most = 0
    all_in = asyncio.Event()

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        if inside == 3:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), 10)  # only returns once three handlers ran side by side
        inside -= 1
        return []

    consumer = Consumer(
        bus, spec(concurrency=3), decoder_for(build_pb2.CompileCandidate), handler, service="test"
    )
    for i in range(4):
        await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id=f"c{i}"), f"compile-c{i}")
    await run_until(consumer, lambda: consumer.stats.handled == 4)
    assert most == 3  # never more than the configured concurrency
    assert consumer.stats.failed == 0
    assert (await settled(bus)).num_ack_pending == 0
    await bus.close()


async def test_stopping_a_concurrent_consumer_lets_started_messages_finish(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    started = asyncio.Event()
    finished: list[str] = []

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        started.set()
        await asyncio.sleep(1.5)
        finished.append(message.candidate_id)
        return []

    consumer = Consumer(
        bus, spec(concurrency=2), decoder_for(build_pb2.CompileCandidate), handler, service="test"
    )
    await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id="c1"), "compile-c1")
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    await asyncio.wait_for(started.wait(), 10)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert finished == ["c1"]
    info = await settled(bus)
    assert info.num_ack_pending == 0 and info.num_pending == 0 and info.num_redelivered == 0
    await bus.close()


async def compile_events(bus: JetStreamBus) -> list[build_pb2.CandidateCompiled]:
    sub = await bus.js.pull_subscribe(subjects.CANDIDATE_COMPILED, stream=subjects.EVENTS_STREAM)
    try:
        msgs = await sub.fetch(10, timeout=1.0)
    except TimeoutError:
        return []
    return [build_pb2.CandidateCompiled.FromString(m.data) for m in msgs]


async def test_a_rejected_work_request_ends_its_work_with_a_failure_event(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        raise Reject("bad_request", "no such build target")

    consumer = Consumer(bus, spec(), decoder_for(build_pb2.CompileCandidate), handler, service="test")
    request = build_pb2.CompileCandidate(candidate_id="c1", run_id="r1", build_target="cpu.testarch")
    await bus.publish(SUBJECT, request, "compile-c1")
    await run_until(consumer, lambda: consumer.stats.dead_lettered == 1)
    [event] = await compile_events(bus)
    assert (event.candidate_id, event.run_id, event.ok, event.reason) == ("c1", "r1", False, "bad_request")
    assert "no such build target" in event.log
    await bus.close()


async def test_a_request_delivered_too_often_is_dead_lettered_with_a_failure_event(
    nats_server: NatsServer,
) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    calls: list[int] = []

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        calls.append(delivery.deliveries)  # a worker that never finishes, as if killed every time
        raise Retry("worker gone", delay_s=0.1)

    consumer = Consumer(
        bus, spec(max_deliver=2), decoder_for(build_pb2.CompileCandidate), handler, service="test"
    )
    await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id="c1", run_id="r1"), "compile-c1")
    await run_until(consumer, lambda: consumer.stats.dead_lettered == 1)
    assert calls == [1, 2]
    [event] = await compile_events(bus)
    assert (event.candidate_id, event.ok, event.reason) == ("c1", False, "max_deliveries")
    assert [letter.reason for letter in await dead_letters(bus)] == ["max_deliveries"]
    await bus.close()


async def test_a_result_published_before_the_dead_letter_wins_over_its_failure_event(
    nats_server: NatsServer,
) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    built = build_pb2.CandidateCompiled(candidate_id="c1", run_id="r1", ok=True)
    await bus.publish(subjects.CANDIDATE_COMPILED, built, "compiled-c1")  # a worker killed before its ack

    async def handler(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        raise Reject("bad_request", "refused on redelivery")

    consumer = Consumer(bus, spec(), decoder_for(build_pb2.CompileCandidate), handler, service="test")
    await bus.publish(SUBJECT, build_pb2.CompileCandidate(candidate_id="c1", run_id="r1"), "compile-c1")
    await run_until(consumer, lambda: consumer.stats.dead_lettered == 1)
    assert [(e.candidate_id, e.ok) for e in await compile_events(bus)] == [("c1", True)]
    await bus.close()
