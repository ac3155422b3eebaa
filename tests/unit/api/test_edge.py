"""The edge without a server: the interceptor's checks, the limits, serving, admission and status mapping."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from kernelfoundry.api.admission import ImportRunAdmission, SubmitRunAdmission, with_defaults
from kernelfoundry.api.errors import ApiError, api_error_of
from kernelfoundry.api.interceptor import EdgeInterceptor, Undecodable, _safe_deserializer
from kernelfoundry.api.limits import ApiLimits
from kernelfoundry.api.serving import ServingProbe, served_from_subjects
from kernelfoundry.lineage.errors import LineageError
from kernelfoundry.tasks.model import TaskError
from kernelfoundry.v1 import lineage_pb2, run_pb2, service_pb2, task_pb2

INT32_MAX = 2**31 - 1


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class FakeContext:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


def submission(**config: Any) -> service_pb2.SubmitRunRequest:
    return service_pb2.SubmitRunRequest(
        task=task_pb2.Task(name="chain", reference_source="import torch\n"),
        config=run_pb2.RunConfig(**config),
    )


def probe(hardware: tuple[str, ...] = (), generators: tuple[str, ...] = ("heuristic",)) -> ServingProbe:
    async def no_consumers() -> list[str]:
        return []

    return ServingProbe(
        no_consumers, configured_hardware=frozenset(hardware), configured_generators=frozenset(generators)
    )


def admission(active: int = 0, limits: ApiLimits | None = None, **served: Any) -> SubmitRunAdmission:
    def build_target_for(hardware: str) -> str:
        if hardware.startswith("cpu."):
            return hardware
        raise TaskError("unknown_hardware", f"no build target is configured for hardware {hardware!r}")

    return SubmitRunAdmission(
        limits or ApiLimits(), probe(**served), "heuristic", lambda: active, build_target_for
    )


def refusal(coroutine: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        asyncio.run(coroutine)
    return caught.value


def test_undecodable_bytes_become_a_marker_not_an_exception() -> None:
    deserialize = _safe_deserializer(service_pb2.SubmitRunRequest.FromString)
    assert deserialize(b"\xff\xff\xff\xff") == Undecodable(4)
    assert deserialize(service_pb2.GetRunRequest(run_id="run-1").SerializeToString()) is not None


def test_an_undecodable_request_is_invalid_argument_before_any_handler() -> None:
    error = refusal(EdgeInterceptor("evolver").admit("SubmitRun", Undecodable(7)))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "undecodable_request")
    assert "7-byte" in error.message


def test_the_contract_runs_before_the_admission() -> None:
    calls: list[object] = []

    async def admit(request: object) -> None:
        calls.append(request)

    edge = EdgeInterceptor("evolver", {"SubmitRun": admit})
    error = refusal(edge.admit("SubmitRun", submission(islands=INT32_MAX)))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "config.islands" in error.message
    assert calls == []
    asyncio.run(edge.admit("SubmitRun", submission()))
    assert len(calls) == 1


def test_a_handler_never_runs_for_a_refused_request_and_the_client_gets_the_status() -> None:
    ran: list[object] = []

    async def handler(request: object, context: object) -> str:
        ran.append(request)
        return "ok"

    unary = EdgeInterceptor("evolver")._unary("GetRun", handler)
    with pytest.raises(Aborted) as caught:
        asyncio.run(unary(service_pb2.GetRunRequest(run_id="../x"), FakeContext()))
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details.startswith("invalid_request: run_id: ")
    assert ran == []
    assert asyncio.run(unary(service_pb2.GetRunRequest(run_id="run-1"), FakeContext())) == "ok"


def test_a_server_fault_is_internal_with_a_reference_and_nothing_of_the_server() -> None:
    async def handler(request: object, context: object) -> str:
        raise KeyError("/srv/secret/path.db")

    unary = EdgeInterceptor("evolver")._unary("GetRun", handler)
    with pytest.raises(Aborted) as caught:
        asyncio.run(unary(service_pb2.GetRunRequest(run_id="run-1"), FakeContext()))
    assert caught.value.code == grpc.StatusCode.INTERNAL
    assert "reference" in caught.value.details
    assert "KeyError" not in caught.value.details and "/srv" not in caught.value.details


def test_a_domain_error_from_a_stream_handler_becomes_its_status() -> None:
    async def handler(request: object, context: object):  # type: ignore[no-untyped-def]
        yield 1
        raise TaskError("empty_task", "the submitted task has no reference source")

    stream = EdgeInterceptor("evolver")._stream("StreamRunProgress", handler)

    async def consume() -> list[object]:
        return [
            item async for item in stream(service_pb2.StreamRunProgressRequest(run_id="run-1"), FakeContext())
        ]

    with pytest.raises(Aborted) as caught:
        asyncio.run(consume())
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details == "empty_task: the submitted task has no reference source"


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("run_not_found", grpc.StatusCode.NOT_FOUND),
        ("archive_too_large", grpc.StatusCode.RESOURCE_EXHAUSTED),
        ("corrupt_archive", grpc.StatusCode.INVALID_ARGUMENT),
        ("invalid_archive", grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_lineage_reasons_map_to_status_codes(reason: str, code: grpc.StatusCode) -> None:
    error = api_error_of(LineageError(reason, "the archive"))
    assert error is not None and error.code == code


def test_anything_else_is_not_a_client_error() -> None:
    assert api_error_of(RuntimeError("boom")) is None


@pytest.mark.parametrize(
    ("config", "limit_name"),
    [
        ({"islands": 9}, "KF_API_MAX_ISLANDS"),
        ({"population": 65}, "KF_API_MAX_POPULATION"),
        ({"iterations": 1001}, "KF_API_MAX_ITERATIONS"),
        ({"population": 64, "islands": 8}, "KF_API_MAX_CANDIDATES_IN_FLIGHT"),
    ],
)
def test_a_run_beyond_a_configured_limit_names_the_limit_and_its_value(
    config: dict[str, int], limit_name: str
) -> None:
    error = refusal(admission(hardware=("cpu.x86_64",))(submission(hardware="cpu.x86_64", **config)))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert limit_name in error.message
    assert "at most" in error.message


def test_a_full_evolver_is_resource_exhausted() -> None:
    error = refusal(admission(active=64, hardware=("cpu.x86_64",))(submission()))
    assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "too_many_runs")


def test_hardware_that_nothing_serves_is_refused_naming_what_is_served() -> None:
    error = refusal(admission(hardware=("cpu.x86_64",))(submission(hardware="cpu.arm64")))
    assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "unserved_hardware")
    assert "cpu.x86_64" in error.message


def test_hardware_without_a_build_target_is_invalid() -> None:
    error = refusal(admission(hardware=("cuda.l40s",))(submission(hardware="cuda.l40s")))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "unknown_hardware")


def test_a_generator_that_nothing_serves_is_refused() -> None:
    error = refusal(admission(hardware=("cpu.x86_64",))(submission(generator="nope")))
    assert (error.code, error.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "unserved_generator")


def test_a_served_submission_passes_and_defaults_fill_in() -> None:
    asyncio.run(admission(hardware=("cpu.x86_64",))(submission()))
    effective = with_defaults(run_pb2.RunConfig(), "heuristic")
    assert (effective.hardware, effective.generator, effective.population) == ("cpu.x86_64", "heuristic", 4)


def test_consumers_serve_what_their_filter_subjects_name() -> None:
    served = served_from_subjects(
        [
            "kf.execute.cuda.h200",
            "kf.compile.cuda.sm90",
            "kf.generate.heuristic",
            "kf.events.>",
            "kf.execute.*",
        ]
    )
    assert served.hardware == {"cuda.h200"}
    assert served.build_targets == {"cuda.sm90"}
    assert served.generators == {"heuristic"}


def test_the_probe_asks_jetstream_once_per_ttl() -> None:
    now = [0.0]
    asked: list[int] = []

    async def lister() -> list[str]:
        asked.append(1)
        return ["kf.execute.cpu.x86_64"]

    serving = ServingProbe(lister, clock=lambda: now[0], ttl_s=2.0)

    async def twice() -> None:
        assert await serving.serves_hardware("cpu.x86_64")
        assert not await serving.serves_generator("heuristic")

    asyncio.run(twice())
    assert len(asked) == 1
    now[0] = 3.0
    asyncio.run(twice())
    assert len(asked) == 2


def test_an_archive_above_the_limit_is_resource_exhausted_before_it_is_read() -> None:
    gate = ImportRunAdmission(ApiLimits(max_archive_bytes=10))
    error = refusal(gate(lineage_pb2.ImportRunRequest(archive=b"x" * 11)))
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "KF_API_MAX_ARCHIVE_BYTES" in error.message
    asyncio.run(gate(lineage_pb2.ImportRunRequest(archive=b"x" * 10)))


def test_the_work_stream_lister_reads_filter_subjects_and_says_when_the_bus_is_down() -> None:
    from kernelfoundry.api.serving import work_consumer_subjects

    class FakeBus:
        def __init__(self, answer: object) -> None:
            self.answer = answer

        async def consumer_subjects(self, stream: str) -> object:
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    listed = asyncio.run(work_consumer_subjects(FakeBus(["kf.execute.cpu.x86_64", "kf.generate.a"]))())  # type: ignore[arg-type]
    assert listed == ["kf.execute.cpu.x86_64", "kf.generate.a"]
    error = refusal(work_consumer_subjects(FakeBus(ConnectionError("down")))())  # type: ignore[arg-type]
    assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "bus_unavailable")
