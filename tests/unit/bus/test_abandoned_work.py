"""The failure event that ends a dead-lettered work request: one per request type, none for events."""

from __future__ import annotations

from kernelfoundry.bus import subjects
from kernelfoundry.bus.abandoned_work import failure_event
from kernelfoundry.v1 import build_pb2, evaluation_pb2, kernel_pb2, run_pb2, search_pb2


def test_a_dead_lettered_evaluation_ends_as_a_failed_evaluation_under_the_executors_message_id() -> None:
    request = build_pb2.EvaluateCandidate(candidate_id="r1-g1-r0-c0", run_id="r1", hardware="cpu.x86_64")
    out = failure_event(request, "max_deliveries", "delivered 6 times")
    assert out is not None
    assert (out.subject, out.msg_id) == (subjects.evaluation_finished("cpu.x86_64"), "evaluated-r1-g1-r0-c0")
    event = out.message
    assert isinstance(event, evaluation_pb2.EvaluationFinished)
    assert (event.run_id, event.hardware, event.correct, event.reason) == (
        "r1",
        "cpu.x86_64",
        False,
        "max_deliveries",
    )
    assert "delivered 6 times" in event.message


def test_a_dead_lettered_build_ends_as_a_failed_build_under_the_compilers_message_id() -> None:
    request = build_pb2.CompileCandidate(candidate_id="c1", run_id="r1", build_target="cpu.x86_64")
    out = failure_event(request, "handler_error", "RuntimeError: toolchain exploded")
    assert out is not None and (out.subject, out.msg_id) == (subjects.CANDIDATE_COMPILED, "compiled-c1")
    assert isinstance(out.message, build_pb2.CandidateCompiled)
    assert (out.message.ok, out.message.reason, out.message.build_target) == (
        False,
        "handler_error",
        "cpu.x86_64",
    )
    assert "toolchain exploded" in out.message.log


def test_a_dead_lettered_generation_ends_as_a_failed_generation_echoing_the_request() -> None:
    request = search_pb2.GenerateCandidates(
        request_id="r1-g2-r0",
        run_id="r1",
        generator="heuristic",
        parent=search_pb2.ParentKernel(candidate_id="r1-g1-r0-c0", source=kernel_pb2.KernelSource()),
        mutation="tiling",
        island=1,
        repair=True,
        iteration=2,
    )
    out = failure_event(request, "bad_request", "unusable task")
    assert out is not None and (out.subject, out.msg_id) == (
        subjects.CANDIDATES_GENERATED,
        "generated-r1-g2-r0",
    )
    event = out.message
    assert isinstance(event, search_pb2.CandidatesGenerated)
    assert not event.candidates and event.error_reason == "bad_request"
    assert (event.parent_id, event.mutation, event.island, event.repair, event.iteration) == (
        "r1-g1-r0-c0",
        "tiling",
        1,
        True,
        2,
    )


def test_an_event_has_no_work_to_end() -> None:
    assert failure_event(run_pb2.RunFinished(run_id="r1"), "handler_error", "disk full") is None
    assert failure_event(evaluation_pb2.EvaluationFinished(candidate_id="c1"), "undecodable", "") is None
