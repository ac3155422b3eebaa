"""A slow task validation is off the critical path: other RPCs and submissions are answered meanwhile.

The evolver's API is served over real gRPC (the edge interceptor and SubmitRun's admission included) with
the validation step given: a task named `slow` holds its validation until the test lets it go, as a
reference that takes minutes would.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from kernelfoundry.api.errors import ApiError
from kernelfoundry.api.serving import ServingProbe
from kernelfoundry.codec import task_to_proto
from kernelfoundry.config import Settings
from kernelfoundry.service_host import public_grpc_server
from kernelfoundry.services.evolver.api import KernelFoundryApi, admissions
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.services.evolver.validation_pool import ValidationPool
from kernelfoundry.tasks.model import Task
from kernelfoundry.v1 import run_pb2, service_pb2, service_pb2_grpc

from .test_evolver_api_ended_runs import CONFIG, Bus
from .test_evolver_runs import TASK, Clock

RELU = (Path(__file__).resolve().parents[3] / "tasks" / "level1_relu.py").read_text()
PROMPT_S = 2.0  # an answer within this is prompt; the held validation lasts until the test ends it
HOLD_S = 60.0


class HeldValidations:
    """validate_task's stand-in: `slow` tasks wait for `release`, every other task passes at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []

    def __call__(self, task: Task, *, device: str, cache_dir: Path, device_lock_dir: str) -> None:
        self.started.append(task.name)
        if task.name.startswith("slow") and not self.release.wait(HOLD_S):
            raise AssertionError("the test never released the slow validation")


def submission(name: str) -> service_pb2.SubmitRunRequest:
    task = Task(name=name, reference_source=RELU)
    return service_pb2.SubmitRunRequest(task=task_to_proto(task), config=CONFIG)


@asynccontextmanager
async def served_api(
    tmp_path: Path, validations: HeldValidations, workers: int, queue: int
) -> AsyncIterator[tuple[service_pb2_grpc.KernelFoundryServiceStub, KernelFoundryApi]]:
    async def nothing() -> list[str]:
        return []

    settings = Settings(
        state_dir=tmp_path,
        served_hardware="cpu.x86_64",
        validation_workers=workers,
        validation_queue=queue,
    )
    runs = RunCoordinator(tmp_path, clock=Clock())
    probe = ServingProbe(
        nothing, configured_hardware=frozenset({"cpu.x86_64"}), configured_generators=frozenset({"heuristic"})
    )
    servicer = KernelFoundryApi(settings, Bus(), runs, probe, validate=validations)  # type: ignore[arg-type]
    server = public_grpc_server("evolver", admissions(settings, runs, probe), max_receive_bytes=1 << 22)
    service_pb2_grpc.add_KernelFoundryServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    runs.start_run("run-busy", TASK, CONFIG, "cpu.x86_64", 1)  # another run, in progress
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield service_pb2_grpc.KernelFoundryServiceStub(channel), servicer
    finally:
        validations.release.set()
        await channel.close()
        await server.stop(grace=1)
        await servicer.close()


async def until(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


def test_other_rpcs_and_a_second_submission_are_answered_while_a_slow_validation_runs(tmp_path: Path) -> None:
    async def scenario() -> None:
        validations = HeldValidations()
        async with served_api(tmp_path, validations, workers=2, queue=0) as (stub, servicer):
            slow = stub.SubmitRun(submission("slow"), timeout=HOLD_S)
            await until(lambda: validations.started == ["slow"])

            started = time.monotonic()
            progress = (
                await stub.GetRun(service_pb2.GetRunRequest(run_id="run-busy"), timeout=PROMPT_S)
            ).progress
            assert progress.status == run_pb2.RUN_STATUS_RUNNING
            stream = stub.StreamRunProgress(service_pb2.StreamRunProgressRequest(run_id="run-busy"))
            first = await asyncio.wait_for(stream.read(), PROMPT_S)
            assert first.progress.run_id == "run-busy"
            stream.cancel()
            small = await stub.SubmitRun(submission("small"), timeout=PROMPT_S)
            assert small.run_id and small.run_id in servicer.runs.runs
            assert time.monotonic() - started < PROMPT_S
            assert not slow.done()  # the slow one is still validating

            validations.release.set()
            assert (await slow).run_id in servicer.runs.runs
            assert servicer.validations.admitted == 0

    asyncio.run(scenario())


def test_slow_validations_leave_the_event_loops_default_executor_free(tmp_path: Path) -> None:
    # As many slow validations as the loop's default executor has threads: had they run there, a name
    # lookup (a NATS reconnect resolves its server's host there) would wait for a validation to end.
    default_threads = min(32, (os.cpu_count() or 1) + 4)

    async def scenario() -> None:
        validations = HeldValidations()
        async with served_api(tmp_path, validations, workers=2, queue=default_threads) as (stub, servicer):
            calls = [stub.SubmitRun(submission(f"slow_{i}"), timeout=HOLD_S) for i in range(default_threads)]
            await until(lambda: servicer.validations.admitted == default_threads)
            loop = asyncio.get_running_loop()
            await asyncio.wait_for(loop.getaddrinfo("localhost", 4222), PROMPT_S)
            assert len(validations.started) == 2  # the pool's two threads, the rest wait in its line
            validations.release.set()
            assert all(response.run_id for response in await asyncio.gather(*calls))

    asyncio.run(scenario())


def test_a_submission_beyond_the_validation_line_is_refused_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        validations = HeldValidations()
        async with served_api(tmp_path, validations, workers=1, queue=1) as (stub, servicer):
            running = stub.SubmitRun(submission("slow_a"), timeout=HOLD_S)
            waiting = stub.SubmitRun(submission("slow_b"), timeout=HOLD_S)
            await until(lambda: servicer.validations.admitted == 2)
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.SubmitRun(submission("small"), timeout=PROMPT_S)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "validation_busy" in (refused.value.details() or "")
            assert time.monotonic() - started < PROMPT_S
            assert len(validations.started) == 1  # one thread: the other waits its turn
            validations.release.set()
            assert (await running).run_id and (await waiting).run_id
            assert servicer.validations.admitted == 0
            assert (await stub.SubmitRun(submission("small"), timeout=PROMPT_S)).run_id  # room again

    asyncio.run(scenario())


def test_a_waiting_validation_whose_caller_left_never_runs_and_frees_its_place() -> None:
    async def scenario() -> None:
        pool = ValidationPool(workers=1, queue=1)
        release = threading.Event()
        ran: list[str] = []

        def held() -> str:
            ran.append("held")
            release.wait(HOLD_S)
            return "held"

        def later() -> str:
            ran.append("later")
            return "later"

        first = asyncio.create_task(pool.run(held))
        await until(lambda: ran == ["held"])
        second = asyncio.create_task(pool.run(later))
        await until(lambda: pool.admitted == 2)
        with pytest.raises(ApiError):
            await pool.run(later)
        second.cancel()
        await until(lambda: pool.admitted == 1)
        release.set()
        assert await first == "held"
        await until(lambda: pool.admitted == 0)
        assert ran == ["held"]
        assert await pool.run(later) == "later"
        pool.close()

    asyncio.run(scenario())
