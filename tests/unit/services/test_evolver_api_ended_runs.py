"""The evolver API answers for runs it no longer holds: the final progress while kept, then the store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from kernelfoundry.api.errors import ApiError
from kernelfoundry.api.serving import ServingProbe
from kernelfoundry.codec import kernel_to_proto
from kernelfoundry.config import Settings
from kernelfoundry.services.evolver.api import KernelFoundryApi
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.services.store.records import finished_summary
from kernelfoundry.v1 import lineage_pb2, run_pb2, service_pb2

from .test_evolver_runs import TASK, Clock, kernel

CONFIG = run_pb2.RunConfig(hardware="cpu.x86_64", generator="heuristic", iterations=1, population=1)


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


class Store:
    """The lineage API as the evolver reads it; counts the reads."""

    def __init__(self) -> None:
        self.records: dict[str, lineage_pb2.RunRecord] = {}
        self.histories: dict[str, lineage_pb2.GetRunHistoryResponse] = {}
        self.reads = 0

    async def get_run(self, run_id: str, timeout_s: float | None = None) -> lineage_pb2.RunRecord:
        self.reads += 1
        if run_id not in self.records:
            raise FakeRpcError(grpc.StatusCode.NOT_FOUND)
        return self.records[run_id]

    async def run_history(self, run_id: str) -> lineage_pb2.GetRunHistoryResponse:
        self.reads += 1
        return self.histories[run_id]


class Bus:
    def __init__(self) -> None:
        self.published: list[Any] = []

    async def publish_all(self, out: list[Any]) -> None:
        self.published.extend(out)


def api(tmp_path: Path, retain: int) -> tuple[KernelFoundryApi, RunCoordinator, Store]:
    async def nothing() -> list[str]:
        return []

    runs = RunCoordinator(tmp_path, clock=Clock(), retain_finished=retain)
    store = Store()
    servicer = KernelFoundryApi(
        Settings(state_dir=tmp_path),
        Bus(),
        runs,
        ServingProbe(nothing),
        lineage=store,  # type: ignore[arg-type]
    )
    return servicer, runs, store


def cancelled_run(runs: RunCoordinator, store: Store, run_id: str) -> run_pb2.RunFinished:
    """A run started and cancelled; the store holds what it would have recorded."""
    runs.start_run(run_id, TASK, CONFIG, "cpu.x86_64", 1)
    [ending] = runs.cancel(run_id)
    finished: run_pb2.RunFinished = ending.message  # type: ignore[assignment]
    finished.progress.best.candidate_id = f"{run_id}-init0"  # as if a kernel had won
    store.records[run_id] = lineage_pb2.RunRecord(
        run_id=run_id,
        task_name=TASK.name,
        status="cancelled",
        config_json=json.dumps({"hardware": "cpu.x86_64", "generator": "heuristic"}),
        summary_json=json.dumps(finished_summary(finished)),
    )
    store.histories[run_id] = lineage_pb2.GetRunHistoryResponse(
        candidates=[
            lineage_pb2.CandidateRecord(candidate_id=f"{run_id}-init0", source=kernel_to_proto(kernel(4)))
        ]
    )
    return finished


def test_a_recently_ended_run_is_answered_from_memory(tmp_path: Path) -> None:
    servicer, runs, store = api(tmp_path, retain=8)
    cancelled_run(runs, store, "run-a")
    progress = asyncio.run(servicer.GetRun(service_pb2.GetRunRequest(run_id="run-a"), None)).progress
    assert progress.status == run_pb2.RUN_STATUS_CANCELLED and store.reads == 0


def test_an_evicted_run_is_answered_from_the_store_with_its_best_kernel(tmp_path: Path) -> None:
    servicer, runs, store = api(tmp_path, retain=0)
    cancelled_run(runs, store, "run-b")
    assert runs.runs == {} and runs.final_progress("run-b") is None
    progress = asyncio.run(servicer.GetRun(service_pb2.GetRunRequest(run_id="run-b"), None)).progress
    assert progress.status == run_pb2.RUN_STATUS_CANCELLED and progress.message == "cancelled by the user"
    best = asyncio.run(servicer.GetBestKernel(service_pb2.GetBestKernelRequest(run_id="run-b"), None)).best
    assert best.candidate_id == "run-b-init0" and "variant 4" in best.source.code
    cancel = asyncio.run(servicer.CancelRun(service_pb2.CancelRunRequest(run_id="run-b"), None))
    assert cancel.progress.status == run_pb2.RUN_STATUS_CANCELLED  # ended: answered, nothing changes

    async def stream() -> list[run_pb2.RunProgress]:
        request = service_pb2.StreamRunProgressRequest(run_id="run-b")
        return [r.progress async for r in servicer.StreamRunProgress(request, None)]

    [only] = asyncio.run(stream())
    assert only.status == run_pb2.RUN_STATUS_CANCELLED


def test_a_run_nobody_holds_is_not_found(tmp_path: Path) -> None:
    servicer, _, _ = api(tmp_path, retain=8)
    with pytest.raises(ApiError) as caught:
        asyncio.run(servicer.GetRun(service_pb2.GetRunRequest(run_id="run-nowhere"), None))
    assert caught.value.code == grpc.StatusCode.NOT_FOUND
