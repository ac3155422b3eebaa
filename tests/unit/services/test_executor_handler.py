"""The executor's handler on the in-memory bus: an evaluation request reads its unit from the artifact
store, hands the judge the unit's bytes, the kernel and the task, and publishes the verdict; a unit not
stored yet brings the request back later; a failed evaluation is a result; a request no judge can serve
is refused. The judge is scripted here (the real one is in tests/integration/evaluation)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery, Reject, Retry, decoder_for
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.codec import kernel_to_proto, task_to_proto
from kernelfoundry.evaluation import EvaluationReport, EvaluationRequest, EvaluationSettings
from kernelfoundry.services.executor.handlers import EvaluateHandler
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2, evaluation_pb2

from .bus_support import consume_until, published, work_spec
from .test_evolver_runs import TASK, kernel

HARDWARE = "cpu.testarch"
SUBJECT = subjects.execute(HARDWARE)
DELIVERY = Delivery(subject=SUBJECT, deliveries=1, stream_sequence=1)
UNIT = b"\x7fELF unit bytes"


class ScriptedJudge:
    """An EvaluationWorker's interface: answers `report`, keeping each request and the unit it was given."""

    def __init__(self, report: EvaluationReport) -> None:
        self.device = "cpu"
        self.report = report
        self.requests: list[EvaluationRequest] = []
        self.units: list[bytes] = []

    def evaluate(self, request: EvaluationRequest) -> EvaluationReport:
        self.requests.append(request)
        self.units.append(Path(request.artifact).read_bytes())
        return self.report


def correct_report() -> EvaluationReport:
    return EvaluationReport(
        compiled=True,
        correct=True,
        runtime_ms=1.0,
        baseline_ms=2.5,
        speedup=2.5,
        max_abs_error=1e-6,
        device="cpu",
        floor_ms=0.4,
        roofline_fraction=0.4,
        bound="memory",
    )


def request(candidate_id: str = "run-000000000001-g1-r0-c0") -> build_pb2.EvaluateCandidate:
    return build_pb2.EvaluateCandidate(
        candidate_id=candidate_id,
        run_id="run-000000000001",
        source=kernel_to_proto(kernel(3)),
        artifact=f"{candidate_id}.so",
        task=task_to_proto(TASK),
        hardware=HARDWARE,
        screen_above_ms=0.4,
    )


def handler_for(bus: InMemoryBus, judge: ScriptedJudge, metrics: Metrics | None = None) -> EvaluateHandler:
    return EvaluateHandler(bus, [judge], EvaluationSettings(), metrics)  # type: ignore[arg-type]


async def test_a_request_is_judged_on_its_stored_unit_and_the_verdict_published() -> None:
    bus = InMemoryBus()
    judge = ScriptedJudge(correct_report())
    metrics = Metrics(process_collectors=False)
    await bus.put_artifact("run-000000000001-g1-r0-c0.so", UNIT)
    await bus.publish(SUBJECT, request(), "evaluate-c0")
    await consume_until(
        bus,
        work_spec("executor-test", SUBJECT),
        decoder_for(build_pb2.EvaluateCandidate),
        handler_for(bus, judge, metrics),
        lambda c: c.stats.handled == 1,
    )
    [asked] = judge.requests
    assert judge.units == [UNIT]
    assert (asked.kernel, asked.task.name, asked.device) == (kernel(3), TASK.name, "cpu")
    assert asked.settings.screen_above_ms == 0.4
    [event] = await published(
        bus, subjects.EVENTS_STREAM, subjects.evaluation_finished(HARDWARE), evaluation_pb2.EvaluationFinished
    )
    assert (event.candidate_id, event.run_id, event.hardware) == (
        "run-000000000001-g1-r0-c0",
        "run-000000000001",
        HARDWARE,
    )
    assert (event.correct, event.speedup, event.runtime_ms, event.baseline_ms) == (True, 2.5, 1.0, 2.5)
    assert not event.screened
    assert (event.floor_ms, event.roofline_fraction, event.bound) == (0.4, 0.4, "memory")
    assert (
        metrics.registry.get_sample_value(
            "kf_evaluations_total", {"hardware": HARDWARE, "outcome": "correct"}
        )
        == 1.0
    )
    assert await bus.stream_messages(subjects.WORK_STREAM) == 0


async def test_a_unit_not_stored_yet_brings_the_request_back_until_it_is() -> None:
    bus = InMemoryBus()
    judge = ScriptedJudge(correct_report())
    handler = handler_for(bus, judge)
    with pytest.raises(Retry):
        await handler(request(), DELIVERY)
    assert judge.requests == []
    await bus.publish(SUBJECT, request(), "evaluate-c0")
    attempts: list[int] = []

    async def counting(message: build_pb2.EvaluateCandidate, delivery: Delivery):  # type: ignore[no-untyped-def]
        attempts.append(delivery.deliveries)
        if delivery.deliveries == 1:
            assert not await bus.stream_messages(subjects.EVENTS_STREAM)
        try:
            return await handler(message, delivery)
        finally:
            await bus.put_artifact("run-000000000001-g1-r0-c0.so", UNIT)  # the compiler's put lands

    consumer = await consume_until(
        bus,
        work_spec("executor-test", SUBJECT),
        decoder_for(build_pb2.EvaluateCandidate),
        counting,
        lambda c: c.stats.handled == 1,
    )
    assert attempts == [1, 2] and consumer.stats.dead_lettered == 0
    assert judge.units == [UNIT]


async def test_a_failed_evaluation_is_a_verdict_with_its_reason_and_no_speedup() -> None:
    bus = InMemoryBus()
    await bus.put_artifact("run-000000000001-g1-r0-c0.so", UNIT)
    failed = EvaluationReport.failure("wrong_output", "max abs error 3.0 above tolerance")
    metrics = Metrics(process_collectors=False)
    [out] = await handler_for(bus, ScriptedJudge(failed), metrics)(request(), DELIVERY)
    assert out.subject == subjects.evaluation_finished(HARDWARE)
    assert out.msg_id == "evaluated-run-000000000001-g1-r0-c0"
    assert (out.message.correct, out.message.reason, out.message.speedup) == (False, "wrong_output", 0.0)
    assert "above tolerance" in out.message.message
    assert (
        metrics.registry.get_sample_value(
            "kf_evaluation_failures_total", {"hardware": HARDWARE, "reason": "wrong_output"}
        )
        == 1.0
    )


async def test_a_request_no_judge_can_serve_is_refused_before_the_unit_is_read() -> None:
    bus = InMemoryBus()
    judge = ScriptedJudge(correct_report())
    broken = request()
    broken.source.language = "fortran"
    with pytest.raises(Reject) as refused:
        await handler_for(bus, judge)(broken, DELIVERY)
    assert refused.value.reason == "bad_request" and judge.requests == []


@pytest.mark.parametrize("reason", ["judge_out_of_memory", "runner_out_of_memory"])
async def test_an_evaluation_out_of_device_memory_brings_the_request_back_then_fails_it(reason: str) -> None:
    """Memory held by other processes on the GPU is no verdict on the candidate (the judge's allocation,
    or the runner's placing buffers before the candidate's code ran): the request comes back later;
    after MEMORY_RETRIES deliveries the failure is published as the verdict."""
    from kernelfoundry.services.executor.handlers import MEMORY_RETRIES

    bus = InMemoryBus()
    oom = EvaluationReport.failure(
        reason, "ran out of memory: OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB."
    )
    judge = ScriptedJudge(oom)
    await bus.put_artifact("run-000000000001-g1-r0-c0.so", UNIT)
    handler = handler_for(bus, judge)
    delays = []
    for attempt in range(1, MEMORY_RETRIES):
        with pytest.raises(Retry, match="out of device memory") as retry:
            await handler(request(), Delivery(subject=SUBJECT, deliveries=attempt, stream_sequence=1))
        delays.append(retry.value.delay_s)
    # each wait doubles: the memory other processes hold is freed in its own time (minutes at most)
    assert delays == [15.0 * 2**k for k in range(MEMORY_RETRIES - 1)] and sum(delays) >= 200
    (out,) = await handler(request(), Delivery(subject=SUBJECT, deliveries=MEMORY_RETRIES, stream_sequence=1))
    assert not out.message.correct and out.message.reason == reason
    assert len(judge.requests) == MEMORY_RETRIES


async def test_out_of_device_memory_is_published_as_failed_before_the_consumer_would_dead_letter_it() -> None:
    """A deployment that allows fewer deliveries than MEMORY_RETRIES still gets a verdict: the last
    delivery the consumer allows publishes the failure instead of asking for one it would not make."""
    bus = InMemoryBus()
    judge = ScriptedJudge(EvaluationReport.failure("judge_out_of_memory", "CUDA out of memory."))
    await bus.put_artifact("run-000000000001-g1-r0-c0.so", UNIT)
    handler = EvaluateHandler(bus, [judge], EvaluationSettings(), max_deliver=2)  # type: ignore[arg-type]
    with pytest.raises(Retry):
        await handler(request(), Delivery(subject=SUBJECT, deliveries=1, stream_sequence=1))
    (out,) = await handler(request(), Delivery(subject=SUBJECT, deliveries=2, stream_sequence=1))
    assert out.message.reason == "judge_out_of_memory"


async def test_a_candidate_that_runs_out_of_memory_itself_is_a_verdict_at_once() -> None:
    bus = InMemoryBus()
    judge = ScriptedJudge(EvaluationReport.failure("glue_error", "the candidate raised OutOfMemoryError"))
    await bus.put_artifact("run-000000000001-g1-r0-c0.so", UNIT)
    (out,) = await handler_for(bus, judge)(request(), DELIVERY)
    assert out.message.reason == "glue_error"


FLIGHT_LOCK = threading.Lock()


class GatedJudge(ScriptedJudge):
    """A judge that holds each evaluation until the test opens the gate, counting those in flight."""

    def __init__(self, report: EvaluationReport, gate: threading.Event, flight: list[int]) -> None:
        super().__init__(report)
        self.gate, self.flight = gate, flight

    def evaluate(self, request: EvaluationRequest) -> EvaluationReport:
        with FLIGHT_LOCK:
            self.flight[0] += 1
            self.flight[1] = max(self.flight[1], self.flight[0])
        try:
            self.gate.wait(10)
            return super().evaluate(request)
        finally:
            with FLIGHT_LOCK:
                self.flight[0] -= 1


@pytest.mark.parametrize("slots", [1, 2])
async def test_an_executor_runs_as_many_evaluations_at_once_as_it_has_slots(slots: int) -> None:
    """Each evaluation takes a free judge: two slots judge two candidates at once, one slot one at a
    time, and every candidate is judged exactly once, by one judge."""
    bus = InMemoryBus()
    gate, flight = threading.Event(), [0, 0]
    judges = [GatedJudge(correct_report(), gate, flight) for _ in range(slots)]
    handler = EvaluateHandler(bus, judges, EvaluationSettings())  # type: ignore[arg-type]
    ids = [f"run-000000000001-g1-r0-c{i}" for i in range(3)]
    for candidate_id in ids:
        await bus.put_artifact(f"{candidate_id}.so", UNIT)
    calls = [asyncio.create_task(handler(request(candidate_id), DELIVERY)) for candidate_id in ids]
    for _ in range(200):  # until every slot holds an evaluation
        await asyncio.sleep(0.01)
        if flight[0] == slots:
            break
    await asyncio.sleep(0.1)  # room for a slot the executor does not have
    assert flight[0] == slots
    gate.set()
    results = await asyncio.gather(*calls)
    assert flight[1] == slots
    assert sum(len(judge.requests) for judge in judges) == len(ids)
    assert all(unit == UNIT for judge in judges for unit in judge.units)
    published_ids = sorted(outgoing[0].message.candidate_id for outgoing in results)
    assert published_ids == sorted(ids)


def test_an_executor_needs_a_judge() -> None:
    with pytest.raises(ValueError, match="at least one evaluation worker"):
        EvaluateHandler(InMemoryBus(), [], EvaluationSettings())


async def test_a_candidate_delivered_again_while_judged_gets_that_verdict_not_a_second_evaluation() -> None:
    """Two slots, the same candidate twice at once (a redelivery): one judge evaluates it, both
    deliveries publish the one verdict."""
    bus = InMemoryBus()
    gate, flight = threading.Event(), [0, 0]
    judges = [GatedJudge(correct_report(), gate, flight) for _ in range(2)]
    handler = EvaluateHandler(bus, judges, EvaluationSettings())  # type: ignore[arg-type]
    await bus.put_artifact("run-000000000001-g1-r0-c0.so", UNIT)
    first = asyncio.create_task(handler(request(), DELIVERY))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if flight[0]:
            break
    again = asyncio.create_task(handler(request(), DELIVERY))
    await asyncio.sleep(0.1)
    assert flight[0] == 1  # the second delivery waits for the first's verdict
    gate.set()
    one, two = await asyncio.gather(first, again)
    assert sum(len(judge.requests) for judge in judges) == 1
    assert one[0].message == two[0].message and one[0].msg_id == two[0].msg_id


async def test_a_delivery_waiting_on_one_that_ends_without_a_verdict_comes_back_later() -> None:
    """The first delivery's artifact is not stored yet (Retry): the one waiting on it retries too."""
    bus = InMemoryBus()
    handler = handler_for(bus, ScriptedJudge(correct_report()))
    artifact = asyncio.Event()
    original = bus.get_artifact

    async def slow_missing(name: str) -> bytes:
        await artifact.wait()
        return await original(name)

    bus.get_artifact = slow_missing  # type: ignore[method-assign]
    first = asyncio.create_task(handler(request(), DELIVERY))
    await asyncio.sleep(0.05)
    again = asyncio.create_task(handler(request(), DELIVERY))
    await asyncio.sleep(0.05)
    artifact.set()
    for call in (first, again):
        with pytest.raises(Retry):
            await call
