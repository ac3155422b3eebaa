"""The compiler's handler on the in-memory bus: a build becomes an artifact, its compile event and the
evaluation request; a failed build is a result; a request no build can serve is dead-lettered and ends
its candidate's work."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery, Reject, decoder_for
from kernelfoundry.bus.memory import InMemoryBus
from kernelfoundry.codec import kernel_to_proto
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.services.compiler.handlers import CompileHandler
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2, run_pb2, task_pb2

from .bus_support import consume_until, published, work_spec

ROOT = Path(__file__).resolve().parents[3]
GOOD = (ROOT / "tests" / "fixtures" / "kernels" / "cpu" / "good_scale.cpp").read_text()
TARGET = cpu_target()
DELIVERY = Delivery(subject=subjects.compile_(TARGET.build), deliveries=1, stream_sequence=1)

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU toolchain (g++) is not installed")


def request(candidate_id: str, code: str, *, target: str = TARGET.build) -> build_pb2.CompileCandidate:
    return build_pb2.CompileCandidate(
        candidate_id=candidate_id,
        run_id="run-000000000001",
        source=kernel_to_proto(KernelSource(language="cpp", code=code)),
        task=task_pb2.Task(name="t", reference_source="import torch\n"),
        build_target=target,
        execute_hardware=TARGET.execute,
        screen_above_ms=0.75,
    )


@needs_gxx
async def test_a_build_is_stored_as_an_artifact_and_asks_for_its_evaluation(tmp_path: Path) -> None:
    bus = InMemoryBus()
    metrics = Metrics(process_collectors=False)
    handler = CompileHandler(bus, tmp_path / "cache", metrics)
    await bus.publish(subjects.compile_(TARGET.build), request("c1", GOOD), "compile-c1")
    await consume_until(
        bus,
        work_spec("compiler", subjects.compile_(TARGET.build)),
        decoder_for(build_pb2.CompileCandidate),
        handler,
        lambda c: c.stats.handled == 1,
    )
    [compiled] = await published(
        bus, subjects.EVENTS_STREAM, subjects.CANDIDATE_COMPILED, build_pb2.CandidateCompiled
    )
    assert (compiled.candidate_id, compiled.ok, compiled.artifact) == ("c1", True, "c1.so")
    assert compiled.toolchain and compiled.build_target == TARGET.build
    [evaluate] = await published(
        bus, subjects.WORK_STREAM, subjects.execute(TARGET.execute), build_pb2.EvaluateCandidate
    )
    assert (evaluate.candidate_id, evaluate.artifact, evaluate.hardware) == ("c1", "c1.so", TARGET.execute)
    assert evaluate.source.code == GOOD and evaluate.task.name == "t"
    assert evaluate.screen_above_ms == 0.75  # the time to beat travels with the candidate
    assert (await bus.get_artifact("c1.so"))[:4] == b"\x7fELF"
    assert (
        metrics.registry.get_sample_value("kf_compiles_total", {"hardware": TARGET.build, "outcome": "ok"})
        == 1.0
    )


@needs_gxx
async def test_a_repeated_request_is_answered_from_the_cache_under_the_same_message_ids(
    tmp_path: Path,
) -> None:
    bus = InMemoryBus()
    handler = CompileHandler(bus, tmp_path / "cache")
    first = await handler(request("c1", GOOD), DELIVERY)
    again = await handler(request("c1", GOOD), DELIVERY)
    assert [o.msg_id for o in first] == [o.msg_id for o in again] == ["compiled-c1", "evaluate-c1"]
    assert again[0].message.cache_hit and not first[0].message.cache_hit


@needs_gxx
async def test_a_build_that_fails_is_a_result_without_an_evaluation(tmp_path: Path) -> None:
    bus = InMemoryBus()
    broken = GOOD.replace("return KF_OK;", "return KF_OK")
    [compiled] = await CompileHandler(bus, tmp_path / "cache")(request("c2", broken), DELIVERY)
    assert compiled.subject == subjects.CANDIDATE_COMPILED
    assert (compiled.message.ok, compiled.message.artifact) == (False, "")
    assert compiled.message.reason and compiled.message.log
    with pytest.raises(LookupError):
        await bus.get_artifact("c2.so")


async def test_a_request_no_build_can_serve_is_rejected(tmp_path: Path) -> None:
    handler = CompileHandler(InMemoryBus(), tmp_path / "cache")
    with pytest.raises(Reject) as refused:
        await handler(request("c3", GOOD, target="fpga.x1"), DELIVERY)
    assert refused.value.reason == "bad_request"
    unknown = request("c4", GOOD)
    unknown.source.language = "fortran"
    with pytest.raises(Reject):
        await handler(unknown, DELIVERY)


async def test_on_the_bus_a_rejected_request_is_dead_lettered_and_its_candidate_ends(tmp_path: Path) -> None:
    bus = InMemoryBus()
    subject = "kf.compile.fpga.x1"
    await bus.publish(subject, request("c5", GOOD, target="fpga.x1"), "compile-c5")
    await consume_until(
        bus,
        work_spec("compiler-fpga", subject),
        decoder_for(build_pb2.CompileCandidate),
        CompileHandler(bus, tmp_path / "cache"),
        lambda c: c.stats.dead_lettered == 1,
    )
    [letter] = await published(
        bus, subjects.DEADLETTER_STREAM, subjects.deadletter(subject), run_pb2.DeadLetter
    )
    assert (letter.reason, letter.service) == ("bad_request", "test")
    [ending] = await published(
        bus, subjects.EVENTS_STREAM, subjects.CANDIDATE_COMPILED, build_pb2.CandidateCompiled
    )
    assert (ending.candidate_id, ending.ok, ending.reason) == ("c5", False, "bad_request")
    assert await bus.stream_messages(subjects.WORK_STREAM) == 0
