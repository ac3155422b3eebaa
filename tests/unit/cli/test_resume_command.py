"""`kernelfoundry resume RUN`: refusals with the server's reason, --detach, and following the run to its end.

Against a small in-process KernelFoundryService (the real generated stubs and status codes; the server's
own checks are tested in tests/unit/services and tests/e2e/test_api_edge.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from typer.testing import CliRunner

from kernelfoundry.cli.main import app
from kernelfoundry.stack.supervisor import free_port
from kernelfoundry.v1 import run_pb2, service_pb2, service_pb2_grpc

STOPPED = "run-stopped1"
FINISHED = "run-finished1"


def progress(run_id: str, status: int, iteration: int = 2) -> run_pb2.RunProgress:
    return run_pb2.RunProgress(
        run_id=run_id,
        task_name="relu",
        status=status,
        iteration=iteration,
        iterations=3,
        message="m",  # type: ignore[arg-type]
    )


class Evolver(service_pb2_grpc.KernelFoundryServiceServicer):
    def __init__(self) -> None:
        self.resumed: list[str] = []

    def ResumeRun(self, request, context):  # type: ignore[no-untyped-def]
        if request.run_id == FINISHED:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"run_not_stopped: run {FINISHED} is finished; only a stopped run can be resumed",
            )
        if request.run_id != STOPPED:
            context.abort(
                grpc.StatusCode.NOT_FOUND, f"run_not_found: no run {request.run_id!r} in the lineage"
            )
        self.resumed.append(request.run_id)
        return service_pb2.ResumeRunResponse(progress=progress(STOPPED, run_pb2.RUN_STATUS_RUNNING))

    def StreamRunProgress(self, request, context):  # type: ignore[no-untyped-def]
        yield service_pb2.StreamRunProgressResponse(progress=progress(STOPPED, run_pb2.RUN_STATUS_RUNNING))
        yield service_pb2.StreamRunProgressResponse(
            progress=progress(STOPPED, run_pb2.RUN_STATUS_COMPLETED, 3)
        )


@pytest.fixture
def evolver() -> Iterator[tuple[str, Evolver]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = Evolver()
    service_pb2_grpc.add_KernelFoundryServiceServicer_to_server(servicer, server)
    address = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(address)
    server.start()
    try:
        yield address, servicer
    finally:
        server.stop(None)


def resume(address: str, *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["resume", *args, "--address", address])


def test_a_refusal_names_the_server_s_reason_and_exits_1(evolver: tuple[str, Evolver]) -> None:
    address, servicer = evolver
    result = resume(address, FINISHED, "--json")
    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    assert error["reason"] == "run_not_stopped" and "finished" in error["message"]
    assert servicer.resumed == []


def test_an_unknown_run_is_run_not_found_and_exits_1(evolver: tuple[str, Evolver]) -> None:
    address, _ = evolver
    result = resume(address, "run-0123456789ab", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["reason"] == "run_not_found"


def test_no_evolver_is_unreachable_and_exits_2() -> None:
    result = CliRunner().invoke(app, ["resume", STOPPED, "--address", f"127.0.0.1:{free_port()}", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["reason"] == "unreachable"


def test_detach_returns_once_the_run_is_running_again(evolver: tuple[str, Evolver]) -> None:
    address, servicer = evolver
    result = resume(address, STOPPED, "--detach", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"run_id": STOPPED, "status": "running", "resumed": True}
    assert servicer.resumed == [STOPPED]


def test_the_resumed_run_is_followed_to_its_end(evolver: tuple[str, Evolver]) -> None:
    address, _ = evolver
    result = resume(address, STOPPED, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["status"] == "completed" and summary["resumed"] is True
